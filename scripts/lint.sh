#!/usr/bin/env bash
# ruff and mypy over the code base, configured in pyproject.toml. Both run; any finding fails.
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
echo "== ruff"
.venv/bin/ruff check . || status=1
echo "== mypy"
.venv/bin/mypy . || status=1
exit "$status"
