#!/usr/bin/env bash
# On the GPU machine (see scripts/device-pack.sh): Node into node_modules/.bin/node, the bundles into dist/,
# and .venv/bin/python as that machine's python3 (which has torch with CUDA) with the client on its path.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f .device/node.xz ] || { echo "device-unpack: .device/node.xz is missing: run scripts/device-pack.sh here and carry .device" >&2; exit 1; }
mkdir -p node_modules/.bin .venv/bin
xz -dc .device/node.xz > node_modules/.bin/node && chmod +x node_modules/.bin/node
mkdir -p dist && cp -r .device/dist/. dist/
python=$(command -v python3)
printf '#!/bin/sh\nPYTHONPATH="%s/clients/python${PYTHONPATH:+:$PYTHONPATH}" exec %s "$@"\n' "$PWD" "$python" > .venv/bin/python
chmod +x .venv/bin/python
torch_info=$(.venv/bin/python -c 'import sys, torch; print(sys.version.split()[0], "with torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1)
echo "device-unpack: node $(node_modules/.bin/node --version); python $python: $torch_info"
