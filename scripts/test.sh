#!/usr/bin/env bash
# Run the whole test suite. On a fresh machine this first creates .venv (Python 3.11+),
# installs oncelog with its test dependencies and ZooKeeper (for the cluster tests).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS='[test]' source scripts/venv.sh
source scripts/zookeeper.sh
exec .venv/bin/python -m pytest -q "$@"
