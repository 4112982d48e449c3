#!/usr/bin/env bash
# Runs built multi-peer test files RUNS times each while BURNERS busy loops hog the CPU: the command
# behind the "20 of 20 under CPU burners" aim (matchmaking at scale).
#
#   scripts/under-load.sh [FILE.test.js ...]
#
# Files: the arguments, or by default every dist/test/**/*.integration.test.js plus
# dist/test/reliability/*.test.js (built files whose test/…ts source is gone are left out).
# Each run: node --test --test-concurrency=1 --test-force-exit FILE, its output in
# $OUT/<file>/run-<k>.log. Runs go round-robin (run 1 of every file, then run 2, ...), so a burst
# of outside load does not land on one file's runs only.
#
# env: RUNS (20), BURNERS (2; each is `node -e 'for(;;){}' under-load-burner:$OUT`),
#      OUT (runs/under-load-<UTC timestamp>), RUN_TIMEOUT (seconds per run, 900).
# Prints one tally line per file, "PASS|FAIL <file>: <p>/<RUNS> passed", followed by the failing
# runs' log paths; exits 1 if any run failed, 2 on a usage error (dist/ not built, no files).
set -u -o pipefail
shopt -s globstar nullglob

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
# The repository's Node 22 first, as npm scripts would have it.
export PATH="$ROOT/node_modules/.bin:$PATH"
# Started from inside a test runner (its own smoke test), node --test would otherwise report to that
# runner instead of running the file and exiting with its verdict.
unset NODE_TEST_CONTEXT

RUNS=${RUNS:-20}
BURNERS=${BURNERS:-2}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}
OUT=${OUT:-runs/under-load-$(date -u +%Y%m%dT%H%M%SZ)}

die () { echo "under-load: $1" >&2; exit 2; }

[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer, got '$RUNS'."
[[ "$BURNERS" =~ ^[0-9]+$ ]] || die "BURNERS must be a non-negative integer, got '$BURNERS'."
[[ -d dist/test ]] || die "dist/ is not built (no dist/test); run 'npm run build' first."

files=()
if (( $# > 0 )); then
  for f in "$@"; do
    [[ -f "$f" ]] || die "no such test file: $f (build with 'npm run build'; give the .js files under dist/)."
    files+=("$f")
  done
else
  stale=0
  for f in dist/test/**/*.integration.test.js dist/test/reliability/*.test.js; do
    src=${f#dist/}; src=${src%.js}.ts
    if [[ -f "$src" ]]; then files+=("$f"); else stale=$((stale + 1)); fi
  done
  (( stale > 0 )) && echo "under-load: left out $stale built test file(s) whose source is gone (stale dist/)" >&2
  (( ${#files[@]} > 0 )) || die "dist/ is not built (no integration or reliability tests under dist/test); run 'npm run build' first."
fi

mkdir -p "$OUT" || die "cannot create OUT=$OUT."
MARKER="under-load-burner:$OUT"

# Every background job in its own process group (set -m), so a run's whole tree can be ended.
set -m
burners=()
run_pid=
cleanup () {
  local pid
  [[ -n "$run_pid" ]] && kill -TERM -- "-$run_pid" 2>/dev/null
  for pid in "${burners[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null; done
  for pid in "${burners[@]}"; do wait "$pid" 2>/dev/null; done
  burners=()
}
trap cleanup EXIT
trap 'echo "under-load: interrupted, burners stopped" >&2; exit 130' INT TERM

for ((b = 0; b < BURNERS; b++)); do
  node -e 'for(;;){}' "$MARKER" &
  burners+=("$!")
done

name_of () { local n=${1#dist/test/}; n=${n#/}; n=${n%.js}; echo "${n//\//__}"; }

declare -A passed failed_logs
for f in "${files[@]}"; do passed[$f]=0; failed_logs[$f]=; mkdir -p "$OUT/$(name_of "$f")"; done

echo "under-load: ${#files[@]} file(s) × $RUNS run(s) with $BURNERS CPU burner(s); logs in $OUT" >&2
for ((k = 1; k <= RUNS; k++)); do
  for f in "${files[@]}"; do
    log="$OUT/$(name_of "$f")/run-$k.log"
    start=$(date +%s.%N)
    # timeout (GNU) signals the run's whole process group when it expires.
    timeout -k 10 "$RUN_TIMEOUT" node --test --test-concurrency=1 --test-force-exit "$f" >"$log" 2>&1 &
    run_pid=$!
    wait "$run_pid"; rc=$?
    run_pid=
    secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    if (( rc == 0 )); then
      passed[$f]=$((passed[$f] + 1)); verdict=ok
    else
      failed_logs[$f]+="$log"$'\n'; verdict="FAILED (exit $rc$( ((rc == 124)) && echo ", timed out after ${RUN_TIMEOUT} s"))"
    fi
    echo "[$k/$RUNS] $f: $verdict in ${secs} s" >&2
  done
done

cleanup
any_failed=0
echo "under-load: $RUNS run(s) per file, $BURNERS CPU burner(s), logs in $OUT"
for f in "${files[@]}"; do
  p=${passed[$f]}
  if (( p == RUNS )); then
    echo "PASS $f: $p/$RUNS passed"
  else
    any_failed=1
    echo "FAIL $f: $p/$RUNS passed, $((RUNS - p)) failed; failing runs' logs:"
    printf '%s' "${failed_logs[$f]}" | sed 's/^/  /'
  fi
done
exit "$any_failed"
