#!/usr/bin/env bash
# The whole test suite on the production parts: a private PostgreSQL and Redis on loopback,
# the real control plane (built once, cached in ~/.cache/gpu-portal), Debian's Chromium.
# Extra arguments go to pytest, e.g. `scripts/test.sh -k quota`.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/apt.sh postgresql redis-server openssl chromium make libpango-1.0-0 libpangoft2-1.0-0 fonts-dejavu-core poppler-utils \
  prometheus  # promtool, for the alerting rules' unit tests (tests/deploy/)
scripts/setup.sh
exec scripts/with-services.sh scripts/run-tests.sh "$@"
