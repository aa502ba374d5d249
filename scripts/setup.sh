#!/usr/bin/env bash
# Creates .venv and installs the portal with its test tools. Safe to run again (fast when done).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  .venv/bin/pip install --quiet --upgrade pip
  .venv/bin/pip install --quiet -e ".[test]"
  rm -f .venv/.installed-*
  touch "$stamp"
fi
