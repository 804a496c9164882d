#!/usr/bin/env bash
# Run the main job (`oncelog demo`). On a fresh machine this first creates .venv
# (Python 3.11+) and installs oncelog; with --brokers (a local cluster) it also installs
# ZooKeeper when it is missing. Extra arguments go to `oncelog demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS='[spark]' source scripts/venv.sh
for arg in "$@"; do
    case "$arg" in
        --brokers|--brokers=*) source scripts/zookeeper.sh; break ;;
    esac
done
exec .venv/bin/oncelog demo "$@"
