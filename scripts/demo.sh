#!/usr/bin/env bash
# Run the main job (`oncelog demo`). On a fresh machine this first creates .venv
# (Python 3.11+) and installs oncelog. Extra arguments go to `oncelog demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS='[spark]' source scripts/venv.sh
exec .venv/bin/oncelog demo "$@"
