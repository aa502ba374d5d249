#!/usr/bin/env bash
# ruff and mypy over the code base, configured in pyproject.toml. Both run; any finding fails.
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
echo "== ruff"
.venv/bin/ruff check . || status=1
echo "== mypy"
# Its cache outside the checkout, like the control plane's: CI starts from a fresh clone, and a
# warm cache makes mypy 2 s instead of 40. mypy checks each cached file against the source.
MYPY_CACHE_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/gpu-portal/mypy .venv/bin/mypy . || status=1
exit "$status"
