#!/usr/bin/env bash
# Packs what a GPU machine lent by the `device` tool needs to run the agent, the Python client's tests and the
# benchmarks without npm: Node (xz, ~29 MB) and single-file bundles of the built entry points (esbuild), into
# .device/ (git-ignored), which `run` then carries (`carry: [".device"]`). On that machine,
# `bash scripts/device-unpack.sh` lays them out where the tests and benchmarks look (node_modules/.bin/node,
# dist/...). tfjs is left out of the agent's bundle: sidecar agents never load it.
# Usage: npm run build && bash scripts/device-pack.sh [entry[:bundle] ...]   (paths relative to dist/)
# The trainer bench's bundle sits in dist/bench/lib/ so that run-impl.ts's ROOT (three folders above its own
# file) is still the repository there.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=.device
ESBUILD_VERSION=0.28.2
entries=("$@")
[ ${#entries[@]} -gt 0 ] || entries=(agent/main.js bench/trainer-step.js:bench/lib/trainer-step.js bench/moshpit-scale.js)
for e in "${entries[@]}"; do
  [ -f "dist/${e%%:*}" ] || { echo "device-pack: dist/${e%%:*} is missing: run \`npm run build\` first" >&2; exit 1; }
done
mkdir -p "$OUT/dist"
node_bin=$(readlink -f node_modules/.bin/node)
if [ ! -f "$OUT/node.xz" ] || [ "$node_bin" -nt "$OUT/node.xz" ]; then
  echo "device-pack: compressing $("$node_bin" --version) ($node_bin)"
  xz -T0 -6 -c "$node_bin" > "$OUT/node.xz.tmp" && mv "$OUT/node.xz.tmp" "$OUT/node.xz"
fi
esbuild=(npm exec --yes --package="esbuild@$ESBUILD_VERSION" -- esbuild)
# ESM bundles of packages that call require() need one: the banner gives them Node's.
banner="import { createRequire as __avsCreateRequire } from 'module'; const require = __avsCreateRequire(import.meta.url);"
for e in "${entries[@]}"; do
  src=${e%%:*} dest=${e#*:}
  mkdir -p "$(dirname "$OUT/dist/$dest")"
  "${esbuild[@]}" "dist/$src" --bundle --platform=node --format=esm --target=node22 --external:@tensorflow/* \
    --banner:js="$banner" --log-level=warning --outfile="$OUT/dist/$dest"
done
du -sh "$OUT"/node.xz "$OUT"/dist
