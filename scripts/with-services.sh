#!/usr/bin/env bash
# Runs a command with a private PostgreSQL and Redis on loopback (DATABASE_URL, REDIS_URL set),
# and removes both afterwards. Used by the test suite and the benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/apt.sh postgresql redis-server
work=$(mktemp -d /tmp/gpu-portal-services.XXXXXX)
chmod 755 "$work"
redis_pid=""
pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
as_pg=""
if [ "$(id -u)" -eq 0 ]; then as_pg="runuser -u postgres --"; fi
cleanup() {
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null || true
  $as_pg "$pg_bin/pg_ctl" -D "$work/pg" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# PostgreSQL refuses to run as root: run it as the postgres account Debian's package made.
mkdir -p "$work/pg"
if [ -n "$as_pg" ]; then chown postgres "$work/pg"; fi
pg_port=$(free_port)
$as_pg "$pg_bin/initdb" -D "$work/pg" -U portal --auth=trust -E UTF8 >/dev/null
$as_pg "$pg_bin/pg_ctl" -D "$work/pg" -l "$work/pg/log" -w \
  -o "-p $pg_port -k $work/pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
  start >/dev/null
"$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U portal portal

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done

export DATABASE_URL="postgres://portal@127.0.0.1:$pg_port/portal"
export REDIS_URL="redis://127.0.0.1:$redis_port/0"
export PORTAL_VAR_DIR="$work/var"
set +e
"$@"
status=$?
set -e
exit "$status"
