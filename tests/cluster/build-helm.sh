#!/usr/bin/env bash
# Build (or reuse) helm, from the Go module proxy, into the cache beside the control plane:
#   ${GPU_PORTAL_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-portal/helm}/<version>/bin/helm
# and beside it the Prometheus operator's ServiceMonitor and PrometheusRule CRDs (from its Go
# module), so the chart's monitoring objects are validated by the API server too:
#   .../helm/prometheus-operator-<version>/crds/*.yaml
# and Gateway API's experimental CRDs (HTTPRoute, ReferenceGrant, Gateway, GatewayClass), for the
# workload routes the portal writes through a Gateway:
#   .../helm/gateway-api-<version>/crds/*.yaml
# HELM_VERSION, PROMETHEUS_OPERATOR_VERSION and GATEWAY_API_VERSION come from versions.env;
# changing one fetches or builds the new version next to the old.
# Idempotent and safe to run concurrently (flock); a finished build is marked by .complete.
#
# Usage: build-helm.sh            build if needed, print the helm binary's path on the last line
#        build-helm.sh --print    only print the path (no build)
#        build-helm.sh --crds     only print the directory of the operator's CRDs
#        build-helm.sh --gateway-crds   only print the directory of Gateway API's CRDs
#        build-helm.sh --check    exit 0 if built, 1 otherwise
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$HERE/versions.env"
CACHE_ROOT=${GPU_PORTAL_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-portal/helm}
OUT="$CACHE_ROOT/$HELM_VERSION"
HELM="$OUT/bin/helm"
CRDS="$CACHE_ROOT/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION/crds"
GATEWAY_CRDS="$CACHE_ROOT/gateway-api-$GATEWAY_API_VERSION/crds"

case "${1:-}" in
  --print) echo "$HELM"; exit 0 ;;
  --crds) echo "$CRDS"; exit 0 ;;
  --gateway-crds) echo "$GATEWAY_CRDS"; exit 0 ;;
  --check) [[ -f "$OUT/.complete" && -f "$CRDS/.complete" && -f "$GATEWAY_CRDS/.complete" ]] && exit 0 || exit 1 ;;
  "") ;;
  *) echo "usage: $0 [--print|--crds|--gateway-crds|--check]" >&2; exit 2 ;;
esac

log() { printf '[build-helm.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ -f "$OUT/.complete" && -f "$CRDS/.complete" && -f "$GATEWAY_CRDS/.complete" ]]; then
  echo "$HELM"
  exit 0
fi
command -v go >/dev/null 2>&1 || { log "ERROR: 'go' (>= 1.25) is required to build helm"; exit 1; }

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.build.lock"
flock 9
export GOTOOLCHAIN=local CGO_ENABLED=0

if [[ ! -f "$CRDS/.complete" ]]; then
  log "downloading the Prometheus operator's CRDs ($PROMETHEUS_OPERATOR_VERSION)"
  OP_DIR=$(cd / && go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" \
    | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
  rm -rf "$CRDS.partial" && mkdir -p "$CRDS.partial"
  cp "$OP_DIR"/example/prometheus-operator-crd/monitoring.coreos.com_{servicemonitors,prometheusrules}.yaml "$CRDS.partial/"
  chmod u+w "$CRDS.partial"/*.yaml
  touch "$CRDS.partial/.complete"
  rm -rf "$CRDS" && mv "$CRDS.partial" "$CRDS"
fi
if [[ ! -f "$GATEWAY_CRDS/.complete" ]]; then
  log "downloading Gateway API's CRDs ($GATEWAY_API_VERSION)"
  GW_DIR=$(cd / && go mod download -json "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION" \
    | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
  rm -rf "$GATEWAY_CRDS.partial" && mkdir -p "$GATEWAY_CRDS.partial"
  cp "$GW_DIR"/config/crd/experimental/gateway.networking.k8s.io_{httproutes,referencegrants,gateways,gatewayclasses}.yaml \
    "$GATEWAY_CRDS.partial/"
  chmod u+w "$GATEWAY_CRDS.partial"/*.yaml
  touch "$GATEWAY_CRDS.partial/.complete"
  rm -rf "$GATEWAY_CRDS" && mv "$GATEWAY_CRDS.partial" "$GATEWAY_CRDS"
fi
if [[ -f "$OUT/.complete" ]]; then  # built by someone else meanwhile
  echo "$HELM"
  exit 0
fi

export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
t_start=$(date +%s)
WORK="$OUT.partial"
rm -rf "$WORK"
mkdir -p "$WORK/bin"
major=${HELM_VERSION%%.*}   # v4
# As for Kueue (build.sh): build inside the downloaded module with its own go.sum rather than
# `go install ...@version`, which also asks the proxy for the module's version list.
log "downloading helm.sh/helm/$major@$HELM_VERSION"
HELM_DIR=$(cd / && go mod download -json "helm.sh/helm/$major@$HELM_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
[[ -d $HELM_DIR ]] || { log "ERROR: could not download helm.sh/helm/$major@$HELM_VERSION"; exit 1; }
log "building helm $HELM_VERSION"
(cd "$HELM_DIR" && GOFLAGS="$GOFLAGS -mod=readonly" go build -trimpath \
  -ldflags "-s -w -X helm.sh/helm/$major/internal/version.version=$HELM_VERSION" -o "$WORK/bin/helm" ./cmd/helm)
"$WORK/bin/helm" version --short >&2
touch "$WORK/.complete"
rm -rf "$OUT"
mv "$WORK" "$OUT"
log "built in $(( $(date +%s) - t_start )) s: $HELM"
echo "$HELM"
