#!/usr/bin/env bash
# Builds the portal's image from the top-level Dockerfile without Docker and without a registry:
# the base python:3.11-slim stands in for is made from Debian's own packages by mmdebstrap
# (bookworm: Python 3.11, python as python3, venv), imported into buildah, and the Dockerfile
# is built on it with chroot isolation (no daemon, no OCI runtime). Then a smoke run: the app
# imports, `manage.py check` passes, as the image's non-root user.
#   scripts/build-image.sh [--tag localhost/gpu-portal:dev] [--no-smoke]
# Needs root (or a user buildah may unshare for) and the network to Debian's and PyPI's mirrors.
set -euo pipefail
cd "$(dirname "$0")/.."

tag=localhost/gpu-portal:dev
smoke=1
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tag=$2; shift 2 ;;
    --no-smoke) smoke=0; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

scripts/apt.sh buildah mmdebstrap
export BUILDAH_ISOLATION=chroot
suite=bookworm
base=localhost/gpu-portal-base:$suite
cache=${XDG_CACHE_HOME:-$HOME/.cache}/gpu-portal/image
mkdir -p "$cache"
start=$(date +%s)

# The base, made once per day at most (a fresh one picks up Debian's security updates).
tarball=$cache/base-$suite-$(date +%Y%m%d).tar
if ! buildah inspect --type image "$base" >/dev/null 2>&1 || [ ! -f "$tarball" ]; then
  rm -f "$cache"/base-$suite-*.tar
  mmdebstrap --variant=minbase --quiet \
    --include=python3,python3-venv,python-is-python3,ca-certificates,tzdata \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    "$suite" "$tarball"
  ctr=$(buildah from scratch)
  buildah add --quiet "$ctr" "$tarball" /
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd python3 "$ctr"
  buildah commit --quiet --rm "$ctr" "$base" >/dev/null
fi
based=$(date +%s)

# pip inside the build trusts what pip here trusts (a TLS-inspecting proxy's CA), mounted for the
# build steps only.
ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
buildah bud --quiet --layers --build-arg PYTHON_IMAGE="$base" \
  --volume "$ca:/etc/ssl/certs/build-host-ca.pem:ro" --build-arg PIP_CERT=/etc/ssl/certs/build-host-ca.pem \
  -f Dockerfile -t "$tag" . >/dev/null
built=$(date +%s)
echo "built $tag: base $((based - start)) s, image $((built - based)) s"

if [ "$smoke" = 1 ]; then
  ctr=$(buildah from "$tag")
  trap 'buildah rm "$ctr" >/dev/null' EXIT
  # As the image's user, with only /tmp to write to (PORTAL_VAR_DIR there: no volume here).
  run() { buildah run --user 10001:10001 --env PORTAL_VAR_DIR=/tmp/var "$ctr" -- "$@"; }
  run python -c 'import portal, tenants, jobs, billing, gunicorn, whitenoise; print("imports: ok")'
  run python manage.py check
  run test -f /app/staticfiles/staticfiles.json
  run sh -c 'test "$(id -u)" = 10001 && ! touch /app/x 2>/dev/null && echo "runs as 10001; /app is not writable"'
  echo "smoke run passed in $(( $(date +%s) - built )) s"
fi
