#!/usr/bin/env bash
# Builds the pinned Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl) and kwok from the Go module proxy into a cache keyed by version.
# Each step is skipped when its binaries are already there, so repeated runs cost nothing.
# Usage: scripts/build-control-plane.sh            (prints the bin dir on its last line)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD="$ROOT/test/cluster"
K8S_VERSION="$(sed -n 's/^\tk8s.io\/kubernetes \(v[0-9.]*\).*/\1/p' "$MOD/go.mod")"
KWOK_VERSION="v0.7.0"
CACHE="${AVS_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/averaging-swarm}/k8s-$K8S_VERSION"
BIN="$CACHE/bin"
mkdir -p "$BIN"

export GOTOOLCHAIN=local CGO_ENABLED=0
# Build flags: static, reproducible paths, stripped; upstream's tags (hack/lib/golang.sh).
# -mod=readonly: the committed go.sum is authoritative; a build never rewrites go.mod or go.sum.
export GOFLAGS="-trimpath -mod=readonly -buildvcs=false"
TAGS="selinux,notest,grpcnotrace"
MINOR="$(echo "$K8S_VERSION" | cut -d. -f2)"
PKG=k8s.io/component-base/version
# Proxy zips keep the "v0.0.0-master" placeholder version: stamp the real one.
LDFLAGS="-s -w -X $PKG.gitVersion=$K8S_VERSION -X $PKG.gitMajor=1 -X $PKG.gitMinor=$MINOR \
 -X $PKG.gitTreeState=clean -X $PKG.gitCommit=0000000000000000000000000000000000000000 \
 -X $PKG.buildDate=1970-01-01T00:00:00Z -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"

log() { echo "[cluster:build $(date -u +%H:%M:%S)] $*" >&2; }
have() { for b in "$@"; do [ -x "$BIN/$b" ] || return 1; done; }

START=$SECONDS
cd "$MOD"
if have kube-apiserver kube-controller-manager kube-scheduler kubectl; then
  log "Kubernetes $K8S_VERSION binaries already in $BIN"
else
  log "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl $K8S_VERSION into $BIN (cold: tens of minutes on 2 cores)"
  TMP="$BIN/.tmp-k8s"; rm -rf "$TMP"; mkdir -p "$TMP"
  go build -tags "$TAGS" -ldflags "$LDFLAGS" -o "$TMP/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
  mv "$TMP"/* "$BIN/" && rmdir "$TMP"
  log "Kubernetes binaries built ($((SECONDS - START)) s so far)"
fi

if have etcd; then
  log "etcd already in $BIN"
else
  log "building etcd (the version k8s.io/kubernetes $K8S_VERSION pins)"
  go build -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$BIN/etcd.tmp" "$BIN/etcd"
  log "etcd built ($((SECONDS - START)) s so far)"
fi

if have kwok; then
  log "kwok already in $BIN"
else
  # Its own module with its own k8s.io/* versions: a plain go install keeps them apart.
  log "installing kwok $KWOK_VERSION"
  (cd /tmp && GOFLAGS="-trimpath" GOBIN="$BIN" go install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION")
  log "kwok installed ($((SECONDS - START)) s so far)"
fi

"$BIN/kube-apiserver" --version >&2
log "control plane ready in $BIN (this run: $((SECONDS - START)) s)"
echo "$BIN"
