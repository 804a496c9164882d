#!/usr/bin/env bash
# The formatter, the linter and the type checker, as CI runs them before the tests (all
# three configured in pyproject.toml). On a fresh machine this first creates .venv like
# scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS='[test]' source scripts/venv.sh
.venv/bin/ruff format --check src tests bench
.venv/bin/ruff check src tests bench
.venv/bin/mypy
