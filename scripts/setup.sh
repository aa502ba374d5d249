#!/usr/bin/env bash
# Creates .venv and installs exactly requirements.lock (the portal's dependencies and its test
# tools, every file checked against its hash), then the portal itself. Safe to run again (fast when
# done): the stamp names the lock's hash, so editing the lock reinstalls and nothing else does.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.installed-$(sha256sum requirements.lock | cut -c1-16)
if [ ! -f "$stamp" ]; then
  .venv/bin/pip install --quiet --require-hashes --only-binary=:all: -r requirements.lock
  .venv/bin/pip install --quiet --no-deps -e .
  rm -f .venv/.installed-*
  touch "$stamp"
fi
