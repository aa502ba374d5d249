#!/usr/bin/env bash
# The portal on its embedded defaults: SQLite, a file-system Celery broker, the simulated
# cluster, demo data. Ctrl-C stops the web server and the worker together.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export DJANGO_SETTINGS_MODULE=portal.settings
PORT=${PORT:-8000}

.venv/bin/python manage.py migrate --noinput -v0
.venv/bin/python manage.py seed_demo
.venv/bin/python manage.py reconcile_cluster

mkdir -p var
.venv/bin/celery -A portal worker --beat --pool=threads --concurrency=4 --loglevel=INFO \
  --schedule=var/celerybeat-schedule >var/worker.log 2>&1 &
worker=$!
.venv/bin/python manage.py watch_workloads >var/watch.log 2>&1 &
watcher=$!
trap 'kill $worker $watcher 2>/dev/null || true; wait $worker $watcher 2>/dev/null || true' EXIT INT TERM

cat <<MSG

  GPU Portal is starting at  http://127.0.0.1:$PORT/
  Log in as alice (member), lena (team lead), finance or admin; password: gpu-portal-demo
  API docs: http://127.0.0.1:$PORT/api/docs/   Logs: var/worker.log, var/watch.log

MSG
.venv/bin/python manage.py runserver "127.0.0.1:$PORT"
