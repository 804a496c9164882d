#!/usr/bin/env bash
# Run the whole test suite. On a fresh machine this first creates .venv (Python 3.11+),
# installs oncelog with its test dependencies, ZooKeeper (for the cluster tests) and
# Kafka's Java client (for the Java AdminClient test).
# It runs on ONCELOG_TEST_WORKERS (default 2) pytest-xdist workers, one test file at a time
# each (a file's module fixtures, such as its cluster, stay in one process), in collection
# order: tests/conftest.py puts the files with slow scenarios first. ONCELOG_TEST_WORKERS=1
# runs it in one process. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS='[test]' source scripts/venv.sh
source scripts/zookeeper.sh
source scripts/kafka_clients.sh
workers=()
if [ "${ONCELOG_TEST_WORKERS:-2}" != 1 ]; then
    workers=(-n "${ONCELOG_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder)
fi
exec .venv/bin/python -m pytest -q "${workers[@]}" "$@"
