#!/usr/bin/env bash
# The portal on its embedded defaults: SQLite, a file-system Celery broker, the simulated
# cluster, demo data. A supervisor restarts any process that exits; Ctrl-C stops them all.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/apt.sh libpango-1.0-0 libpangoft2-1.0-0 fonts-dejavu-core  # WeasyPrint, for PDF statements
scripts/setup.sh
export DJANGO_SETTINGS_MODULE=portal.settings
# Off, as in production: errors show the portal's own 403/404/500 pages, not Django's debug pages.
export DEBUG=${DEBUG:-false}
PORT=${PORT:-8000}
# Links the portal writes (emails, notifications, the seed's own) point at the port it serves on.
export SITE_URL=${SITE_URL:-http://127.0.0.1:$PORT}

.venv/bin/python manage.py migrate --noinput -v0
.venv/bin/python manage.py seed_demo
.venv/bin/python manage.py reconcile_cluster

cat <<MSG

  GPU Portal is starting at  http://127.0.0.1:$PORT/
  Log in as alice (member), lena (team lead), finance or admin; password: gpu-portal-demo
  API docs: http://127.0.0.1:$PORT/api/docs/   Ready? http://127.0.0.1:$PORT/readyz
  Logs in ${PORTAL_VAR_DIR:-var}/: worker.log, beat.log, watch.log; restarts in supervisor.log

MSG
# The worker, beat, the watch sync and the web server, each restarted if it exits.
exec .venv/bin/python manage.py run_demo_processes --web "127.0.0.1:$PORT"
