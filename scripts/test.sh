#!/usr/bin/env bash
# Run the whole test suite. On a fresh machine this first creates .venv (Python 3.11+),
# installs oncelog with its test dependencies, ZooKeeper (for the cluster tests) and
# Kafka's Java client (for the Java AdminClient test).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS='[test]' source scripts/venv.sh
source scripts/zookeeper.sh
source scripts/kafka_clients.sh
exec .venv/bin/python -m pytest -q "$@"
