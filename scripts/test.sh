#!/usr/bin/env bash
# The whole test suite on the production parts: a private PostgreSQL and Redis on loopback,
# the real control plane (built once, cached in ~/.cache/gpu-portal), Debian's Chromium.
# Extra arguments go to pytest, e.g. `scripts/test.sh -k quota`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

scripts/apt.sh postgresql redis-server openssl chromium make
scripts/setup.sh

work=$(mktemp -d /tmp/gpu-portal-test.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ -n "${pg_ctl:-}" ] && $as_pg "$pg_ctl" -D "$work/pg" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { .venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# PostgreSQL refuses to run as root: run it as the postgres account Debian's package made.
pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
pg_ctl="$pg_bin/pg_ctl"
as_pg=""
if [ "$(id -u)" -eq 0 ]; then as_pg="runuser -u postgres --"; fi
mkdir -p "$work/pg"
if [ -n "$as_pg" ]; then chown postgres "$work/pg"; fi
pg_port=$(free_port)
$as_pg "$pg_bin/initdb" -D "$work/pg" -U portal --auth=trust -E UTF8 >/dev/null
$as_pg "$pg_ctl" -D "$work/pg" -l "$work/pg/log" -w -o "-p $pg_port -k $work/pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" start >/dev/null
"$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U portal portal

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no >"$work/redis.log" 2>&1 &
pids+=($!)

export DATABASE_URL="postgres://portal@127.0.0.1:$pg_port/portal"
export REDIS_URL="redis://127.0.0.1:$redis_port/0"
export PORTAL_VAR_DIR="$work/var"
for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done

echo "== Production settings pass Django's deployment checks"
PORTAL_PRODUCTION=1 SECRET_KEY="$(head -c 48 /dev/urandom | base64)" ALLOWED_HOSTS=portal.example.com \
  SITE_URL=https://portal.example.com .venv/bin/python manage.py check --deploy --fail-level WARNING

echo "== Migrations are complete"
.venv/bin/python manage.py makemigrations --check --dry-run >/dev/null

echo "== pytest on PostgreSQL ($DATABASE_URL) and Redis ($REDIS_URL)"
set +e
.venv/bin/pytest -p no:cacheprovider "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here." >&2
  exit 1
fi
exit "$status"
