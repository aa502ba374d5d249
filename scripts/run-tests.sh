#!/usr/bin/env bash
# The checks and pytest, with DATABASE_URL and REDIS_URL already pointing at running services.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/lint.sh

echo "== Production settings pass Django's deployment checks"
PORTAL_PRODUCTION=1 SECRET_KEY="$(head -c 48 /dev/urandom | base64)" ALLOWED_HOSTS=portal.example.com \
  SITE_URL=https://portal.example.com .venv/bin/python manage.py check --deploy --fail-level WARNING

echo "== Migrations are complete"
.venv/bin/python manage.py makemigrations --check --dry-run >/dev/null

echo "== The docs site builds strictly (a broken link, a missing anchor or a page left out of the nav fails)"
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
.venv/bin/mkdocs build --strict --quiet --site-dir "$site"

echo "== pytest on PostgreSQL ($DATABASE_URL) and Redis ($REDIS_URL)"
set +e
# One pytest-xdist worker per core; the real control plane's tests share one worker (tests/conftest.py).
.venv/bin/pytest -p no:cacheprovider -n "${PYTEST_WORKERS:-auto}" --dist loadgroup "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here." >&2
  exit 1
fi
exit "$status"
