/**
 * Checkpoint write benchmark (not a test): time and MB/s of writeCheckpoint (safetensors data,
 * fsync, rename, manifest, latest) for float32 models of 25M and 250M values, into tmpfs and disk folders;
 * the bfloat16 write (narrowing through the scratch buffer); the restore (loadNewestCheckpoint: read,
 * sha256, verify); and the cost of the snapshot copy the agent would make so averaging can go on while
 * the checkpoint streams out.
 *
 *   npm run build && node_modules/.bin/node dist/bench/checkpoint-write.js [elements,...] [folder,...]
 *   node_modules/.bin/node dist/bench/checkpoint-write.js 25000000,250000000 /dev/shm,/tmp
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { loadNewestCheckpoint, writeCheckpoint } from '../agent/checkpoint/index.js'
import type { TensorSource } from '../agent/checkpoint/index.js'
import type { StorageDtype } from '../agent/workloads/sidecar/dtypes.js'

const sizes = (process.argv[2] ?? '25000000,250000000').split(',').map(Number)
const folders = (process.argv[3] ?? `/dev/shm,${tmpdir()}`).split(',')
/** The model as tensors of at most 16M values (like a transformer's layers), summing to `elements`. */
function model (elements: number, dtype: StorageDtype): TensorSource[] {
  const out: TensorSource[] = []
  for (let at = 0, i = 0; at < elements; i++) {
    const n = Math.min(16 << 20, elements - at)
    const data = new Float32Array(n)
    for (let j = 0; j < n; j++) data[j] = ((j * 2654435761) >>> 0) / 4294967296 - 0.5
    out.push({ name: `layer.${i}`, dtype, shape: [n], data })
    at += n
  }
  return out
}
const ms = (t0: bigint): number => Number(process.hrtime.bigint() - t0) / 1e6
const fmt = (x: number): string => x.toFixed(x < 10 ? 2 : x < 100 ? 1 : 0)

console.log('| values | dtype | folder | file MB | write ms | write MB/s | restore ms | restore MB/s | snapshot copy ms | copy GB/s |')
console.log('|---|---|---|---|---|---|---|---|---|---|')
for (const elements of sizes) {
  for (const dtype of ['float32', 'bfloat16'] as const) {
    if (dtype === 'bfloat16' && elements > 25_000_000) continue
    const tensors = model(elements, dtype)
    // The snapshot: a copy of every tensor (what the agent would take between rounds), timed once per size.
    let t0 = process.hrtime.bigint()
    const copy = tensors.map(t => ({ ...t, data: (t.data as Float32Array).slice() }))
    const copyMs = ms(t0)
    for (const folder of folders) {
      const dir = await mkdtemp(join(folder, 'ckpt-bench-'))
      try {
        let best = Infinity
        let bytes = 0
        for (let round = 1; round <= 2; round++) {
          t0 = process.hrtime.bigint()
          const { manifest } = await writeCheckpoint({ dir, swarm: 'bench', round, samples: 0, tensors: copy, keep: 1 })
          best = Math.min(best, ms(t0))
          bytes = manifest.file.bytes
        }
        t0 = process.hrtime.bigint()
        const { checkpoint } = await loadNewestCheckpoint(dir, 'bench')
        const loadMs = ms(t0)
        if (checkpoint === null) throw new Error('the checkpoint did not load')
        const mb = bytes / 1e6
        console.log(`| ${elements / 1e6}M | ${dtype} | ${folder} | ${fmt(mb)} | ${fmt(best)} | ${fmt(mb / best * 1e3)} | ${fmt(loadMs)} | ${fmt(mb / loadMs * 1e3)} | ${fmt(copyMs)} | ${fmt(elements * 4 / 1e6 / copyMs)} |`)
      } finally {
        await rm(dir, { recursive: true, force: true })
      }
    }
  }
}
