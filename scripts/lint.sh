#!/usr/bin/env bash
# ruff and mypy over the code base, configured in pyproject.toml. Any finding fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== ruff"
.venv/bin/ruff check .
echo "== mypy"
.venv/bin/mypy .
