#!/usr/bin/env bash
# Resolves pyproject.toml's ranges (the runtime and the test extra) into requirements.lock: exact
# versions with the hash of every file, which scripts/setup.sh installs with --require-hashes.
# Run it after changing a range; `scripts/lock.sh --upgrade` moves every pin to the newest allowed,
# `scripts/lock.sh --upgrade-package django` just one. pip-tools lives in its own venv, not in .venv.
# requirements-runtime.lock is the runtime part alone (no test extra), held to the same versions:
# what the container image installs (Dockerfile, scripts/build-image.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

tools=${XDG_CACHE_HOME:-$HOME/.cache}/gpu-portal/pip-tools
if [ ! -x "$tools/bin/pip-compile" ]; then
  python3 -m venv "$tools"
  "$tools/bin/pip" install --quiet "pip-tools>=7.4,<8"
fi
CUSTOM_COMPILE_COMMAND=scripts/lock.sh "$tools/bin/pip-compile" --quiet --extra test --generate-hashes \
  --strip-extras --no-emit-index-url --no-emit-find-links --output-file requirements.lock "$@" pyproject.toml
CUSTOM_COMPILE_COMMAND=scripts/lock.sh "$tools/bin/pip-compile" --quiet --generate-hashes \
  --strip-extras --no-emit-index-url --no-emit-find-links -c requirements.lock \
  --output-file requirements-runtime.lock pyproject.toml
