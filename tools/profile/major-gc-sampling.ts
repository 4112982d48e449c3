/**
 * Where the garbage that V8's full collections sweep comes from. Load it into any of our processes:
 *
 *   AVS_HEAP_SAMPLING_DIR=/tmp/hs NODE_OPTIONS="--import $PWD/dist/tools/profile/major-gc-sampling.js" \
 *     node dist/bench/allreduce.js --impl ours --peers 4 --elements 25M --rounds 4 --warmup 1
 *   node dist/tools/profile/heap-profile-summary.js /tmp/hs/<pid>.heapprofile
 *
 * It samples allocations (one per 8 KiB on average) with V8's sampling heap profiler told to keep
 * the samples of objects that a major GC collected, and drops those a minor GC collected: what is
 * left is what lived, or died old. Garbage that dies old is what sets off the mark-compacts (the
 * agent's live heap is ~25 MB of modules; every full collection marks all of it), and
 * `--trace-gc` alone does not say who made it. At exit the profile goes to $AVS_HEAP_SAMPLING_DIR.
 */
import { Session } from 'node:inspector'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

const dir = process.env.AVS_HEAP_SAMPLING_DIR
if (dir !== undefined && dir !== '') {
  mkdirSync(dir, { recursive: true })
  const session = new Session()
  session.connect()
  session.post('HeapProfiler.enable')
  session.post('HeapProfiler.startSampling', { samplingInterval: 8192, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: false })
  let written = false
  const write = (): void => {
    if (written) return
    written = true
    // The inspector answers on this thread synchronously for a connected in-process session.
    session.post('HeapProfiler.stopSampling', (err, result) => {
      if (err == null) writeFileSync(join(dir, `${process.pid}.heapprofile`), JSON.stringify(result.profile))
    })
  }
  const exit = process.exit.bind(process)
  process.exit = ((code?: number | string | null) => { write(); return exit(code) }) as typeof process.exit
  process.on('beforeExit', write)
}
