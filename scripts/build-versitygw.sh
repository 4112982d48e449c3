#!/usr/bin/env bash
# Builds versitygw (github.com/versity/versitygw, Apache-2.0), an S3-compatible gateway whose posix
# backend serves a folder as buckets, from the Go module proxy into a cache keyed by version. The
# S3 checkpoint store's tests (test/agent/checkpoint/s3-store.test.ts) start it on loopback.
# Skipped when the binary is already there. Usage: scripts/build-versitygw.sh  (prints the binary's path last)
set -euo pipefail

VERSITYGW_VERSION="${VERSITYGW_VERSION:-v1.8.0}"
CACHE="${AVS_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/averaging-swarm}/versitygw-$VERSITYGW_VERSION"
BIN="$CACHE/bin"
log() { echo "[versitygw:build $(date -u +%H:%M:%S)] $*" >&2; }

START=$SECONDS
if [ -x "$BIN/versitygw" ]; then
  log "versitygw $VERSITYGW_VERSION already in $BIN"
else
  mkdir -p "$BIN"
  log "installing versitygw $VERSITYGW_VERSION into $BIN (cold: about a minute or two on 2 cores)"
  # Outside any module (go install pkg@version uses the module's own go.mod and go.sum); GOFLAGS is
  # replaced, not inherited, so a caller's -mod=... (the control-plane script sets -mod=readonly for its
  # own module) cannot leak in: `go install pkg@version` rejects -mod. Static (CGO off), stripped, its
  # version stamped (the Makefile sets main.Version; a proxy build would say "git").
  # Installed into a temporary GOBIN and moved, so an interrupted build never leaves a partial binary.
  TMP="$BIN/.tmp"; rm -rf "$TMP"; mkdir -p "$TMP"
  (cd /tmp && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false" GOBIN="$TMP" \
    go install -ldflags "-s -w -X main.Version=$VERSITYGW_VERSION" "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION")
  mv "$TMP/versitygw" "$BIN/versitygw" && rmdir "$TMP"
  log "versitygw built ($((SECONDS - START)) s)"
fi
"$BIN/versitygw" --version >&2 || true
echo "$BIN/versitygw"
