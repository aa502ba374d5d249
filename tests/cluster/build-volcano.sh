#!/usr/bin/env bash
# Build (or reuse) Volcano's scheduler, controller manager and webhook manager, from the Go module
# proxy, into the cache beside the control plane, with its CRDs:
#   ${GPU_PORTAL_VOLCANO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-portal/volcano}/<version>/
#     bin/{vc-scheduler,vc-controller-manager,vc-webhook-manager}  crd/*.yaml  versions.txt  .complete
# VOLCANO_VERSION comes from versions.env (v1.10.0: the only release the proxy serves here; its
# go.mod pins Kubernetes 1.30's modules and every `replace` names a published version, so it builds
# inside the downloaded module as it is). Idempotent and safe to run concurrently (flock). A cache
# made before a binary was added to the list counts as not built, so it is rebuilt (Go's build
# cache makes the binaries already there quick to relink).
#
# Usage: build-volcano.sh          build if needed, print the output directory on the last line
#        build-volcano.sh --print  only print the directory (no build)
#        build-volcano.sh --check  exit 0 if built, 1 otherwise
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$HERE/versions.env"
CACHE_ROOT=${GPU_PORTAL_VOLCANO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-portal/volcano}
OUT="$CACHE_ROOT/$VOLCANO_VERSION"
COMMANDS=(scheduler controller-manager webhook-manager)

built() {
  [[ -f "$OUT/.complete" ]] || return 1
  local cmd
  for cmd in "${COMMANDS[@]}"; do [[ -x "$OUT/bin/vc-$cmd" ]] || return 1; done
}

case "${1:-}" in
  --print) echo "$OUT"; exit 0 ;;
  --check) built && exit 0 || exit 1 ;;
  "") ;;
  *) echo "usage: $0 [--print|--check]" >&2; exit 2 ;;
esac

log() { printf '[build-volcano.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if built; then
  echo "$OUT"
  exit 0
fi
command -v go >/dev/null 2>&1 || { log "ERROR: 'go' (>= 1.22) is required to build Volcano"; exit 1; }

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.build.lock"
flock 9
if built; then  # built by someone else meanwhile
  echo "$OUT"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -buildvcs=false -mod=readonly"
t_start=$(date +%s)
WORK="$OUT.partial"
rm -rf "$WORK"
mkdir -p "$WORK/bin" "$WORK/crd"
log "downloading volcano.sh/volcano@$VOLCANO_VERSION"
JSON=$(cd / && go mod download -json "volcano.sh/volcano@$VOLCANO_VERSION")
SRC=$(sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p' <<<"$JSON")
[[ -d $SRC ]] || { log "ERROR: could not download volcano.sh/volcano@$VOLCANO_VERSION"; exit 1; }
ldflags="-s -w -X volcano.sh/volcano/pkg/version.Version=$VOLCANO_VERSION"
for cmd in "${COMMANDS[@]}"; do
  log "building vc-$cmd $VOLCANO_VERSION"
  (cd "$SRC" && go build -trimpath -ldflags "$ldflags" -o "$WORK/bin/vc-$cmd" "./cmd/$cmd")
done
# The scheduling, batch and bus CRDs (apiextensions v1; the v1beta1 directory is for old clusters),
# and the Numatopology one the scheduler watches.
cp "$SRC"/config/crd/volcano/bases/*.yaml "$WORK/crd/"
chmod u+w "$WORK/crd"/*.yaml
# No admission configuration: it only configures /pods/mutate's resource groups, and the harness
# runs /pods/validate alone.
printf 'VOLCANO_VERSION=%s\nGO=%s\n' "$VOLCANO_VERSION" "$(go env GOVERSION)" >"$WORK/versions.txt"
touch "$WORK/.complete"
rm -rf "$OUT"
mv "$WORK" "$OUT"
log "built in $(( $(date +%s) - t_start )) s: $OUT"
echo "$OUT"
