#!/usr/bin/env bash
# The checks only a GPU machine proves, run there through the `device` tool (see scripts/device-pack.sh):
#   here:   npm run build && bash scripts/device-pack.sh
#   there:  run(command="bash scripts/device-gpu-checks.sh", carry=[".device"])
# 1. the Python client's CUDA tests (pytest -m cuda) and its half-precision DiLoCo test, against bundled agents,
#    and its DDP ranks with their model on the GPU (test_replicas.py, gloo between them);
# 2. bench:trainer with the parameter on the GPU beside the CPU torch path, 2 peers (BENCH_SIZES: 25M,1000M).
# Logs and the report go to $OUT (or bench/results/device when OUT is unset).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/results/device}
mkdir -p "$out"
bash scripts/device-unpack.sh 2>&1 | tee "$out/setup.log" || exit 1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; free -g | head -2; } 2>&1 | tee -a "$out/setup.log"
export PATH=$PWD/node_modules/.bin:$PATH PYTHONUNBUFFERED=1
status=0
echo "=== pytest -m cuda ($(date -u +%H:%M:%S))"
timeout "${PYTEST_TIMEOUT:-240}" .venv/bin/python -m pytest -q -p no:cacheprovider -m 'cuda or not cuda' \
  clients/python/tests/test_devices.py 2>&1 | tee "$out/pytest-cuda.log" || status=1
echo "=== pytest -m cuda test_replicas.py: DDP ranks with their model on the GPU ($(date -u +%H:%M:%S))"
timeout "${PYTEST_TIMEOUT:-240}" .venv/bin/python -m pytest -q -p no:cacheprovider -m cuda \
  clients/python/tests/test_replicas.py 2>&1 | tee "$out/pytest-cuda-replicas.log" || status=1
echo "=== bench:trainer torch,cuda ($(date -u +%H:%M:%S))"
timeout "${BENCH_TIMEOUT:-330}" node dist/bench/lib/trainer-step.js --paths torch,cuda --peers 2 \
  --elements "${BENCH_SIZES:-25M,1000M}" --rounds 2 --timeout 150 --out "$out/trainer-step.md" --logs /tmp/bench-logs 2>&1 \
  | tee "$out/trainer-step.log" || status=1
echo "=== done ($(date -u +%H:%M:%S)), status $status"
exit $status
