#!/usr/bin/env bash
# The formatter and the linter, as CI runs them before the tests (configured in
# pyproject.toml). On a fresh machine this first creates .venv like scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS='[test]' source scripts/venv.sh
.venv/bin/ruff format --check src tests bench
.venv/bin/ruff check src tests bench
