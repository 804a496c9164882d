# Sourced by scripts/test.sh and scripts/demo.sh: create .venv on a fresh machine
# (Python 3.11+) and install oncelog into it in editable mode with the extras in $EXTRAS.
if [ ! -x .venv/bin/python ]; then
    python=$(command -v python3.11 || command -v python3 || true)
    if [ -z "$python" ]; then
        echo "python3.11 (or python3 >= 3.11) is required" >&2
        exit 1
    fi
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
        echo "$python is $("$python" -V 2>&1); oncelog needs Python 3.11+" >&2
        exit 1
    }
    echo "creating .venv with $("$python" -V 2>&1)"
    "$python" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".${EXTRAS:-}"
