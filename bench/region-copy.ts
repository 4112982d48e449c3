/**
 * The agent's passes over a trainer's shared-memory region in one region step, timed one by one
 * (wall and this process's CPU time): the finiteness check, the copy into the agent's tensors, and
 * the write-back of the mean, with the divergence read from the region (a round that kept parts
 * local) or without (every part landed: the round summed it, timed beside). No network, no round:
 * only what a step adds to it.
 *
 *   node dist/bench/region-copy.js [--mib 100] [--reps 5] [--dtype float32|float16|bfloat16] [--dir /dev/shm]
 *
 * Prints the median of each pass over the repetitions.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { Region, Scratch } from '../agent/workloads/sidecar/region.js'
import { regionLayout, REGION_MAGIC, type StoredTensor } from '../agent/workloads/sidecar/region-layout.js'
import { DistanceSum } from '../agent/workloads/sidecar/distance.js'
import type { StorageDtype } from '../agent/workloads/sidecar/dtypes.js'

function arg (name: string, fallback: string): string {
  const at = process.argv.indexOf(`--${name}`)
  return at >= 0 && at + 1 < process.argv.length ? process.argv[at + 1] : fallback
}

interface Sample { wall: number, cpu: number }

/** The parts the landing sums over: the default part size (AVS_PART_SIZE_BYTES) of float32. */
const LANDED_PART = 65536 / 4

function timed<T> (fn: () => T): { value: T, sample: Sample } {
  const cpu = process.cpuUsage()
  const start = performance.now()
  const value = fn()
  const wall = performance.now() - start
  const used = process.cpuUsage(cpu)
  return { value, sample: { wall, cpu: (used.user + used.system) / 1000 } }
}

const median = (xs: number[]): number => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)] }

async function main (): Promise<void> {
  const mib = Number(arg('mib', '100'))
  const reps = Number(arg('reps', '5'))
  const dtype = arg('dtype', 'float32') as StorageDtype
  const base = arg('dir', '/dev/shm')
  const dir = mkdtempSync(join(base === '' ? tmpdir() : base, 'avs-region-bench-'))
  try {
    const size = dtype === 'float32' ? 4 : 2
    const n = Math.floor((mib * 2 ** 20) / size)
    const schema: StoredTensor[] = [{ name: 'x', shape: [n], dtype }]
    const layout = regionLayout(schema)
    const file = Buffer.alloc(layout.bytes)
    file.write(REGION_MAGIC, 0, 'latin1')
    const values = new Float32Array(n)
    for (let i = 0; i < n; i++) values[i] = Math.sin(i) * 3
    if (dtype === 'float32') Buffer.from(values.buffer).copy(file, layout.offsets[0].offset)
    else {
      const bits = new Uint32Array(values.buffer)
      const out = new Uint16Array(file.buffer, file.byteOffset + layout.offsets[0].offset, n)
      for (let i = 0; i < n; i++) out[i] = dtype === 'bfloat16' ? bits[i] >>> 16 : 0x3c00 + (i & 0xff)
    }
    writeFileSync(join(dir, 'r'), file)
    const region = Region.open(dir, 'r', layout)
    const scratch = new Scratch()
    const tensors = [new Float32Array(n)]
    const mean = [new Float32Array(n)]
    for (let i = 0; i < n; i++) mean[0][i] = values[i] * 0.5
    const rows: Record<string, Sample[]> = { check: [], copyIn: [], distance: [], writeBack: [], 'write-back + distance': [], 'write-back (every part landed)': [], 'sums at landing (in the round)': [] }
    let divergence = 0
    for (let r = 0; r < reps + 1; r++) {
      const keep = r > 0 // the first repetition warms the JIT and the page cache
      // Read: the check pass runs before apply is called, the copy pass inside it.
      let cpu = process.cpuUsage()
      let start = performance.now()
      await region.readInto(scratch, async copy => {
        const used = process.cpuUsage(cpu)
        if (keep) rows.check.push({ wall: performance.now() - start, cpu: (used.user + used.system) / 1000 })
        cpu = process.cpuUsage()
        start = performance.now()
        const ok = await copy(tensors)
        const used2 = process.cpuUsage(cpu)
        if (keep) rows.copyIn.push({ wall: performance.now() - start, cpu: (used2.user + used2.system) / 1000 })
        return ok
      })
      // Write-back with the divergence: fused where the region offers it, else the two passes.
      const fused = (region as unknown as { writeBack?: (now: readonly Float32Array[], generation: number, scratch: Scratch, sum: DistanceSum) => number }).writeBack
      const sum = new DistanceSum()
      if (fused !== undefined) {
        const t = timed(() => fused.call(region, mean, r + 1, scratch, sum))
        if (keep) rows['write-back + distance'].push(t.sample)
      } else {
        // The passes before the fused write-back (commit 55062fa and earlier).
        const old = region as unknown as { addDistance: (now: readonly Float32Array[], sum: DistanceSum, scratch: Scratch) => void }
        const d = timed(() => { old.addDistance(mean, sum, scratch) })
        const w = timed(() => region.writeFrom(mean, r + 1, scratch))
        if (keep) {
          rows.distance.push(d.sample)
          rows.writeBack.push(w.sample)
          rows['write-back + distance'].push({ wall: d.sample.wall + w.sample.wall, cpu: d.sample.cpu + w.sample.cpu })
        }
      }
      divergence = sum.value
      // A round that landed every part summed the divergence as they landed (StepOptions.landed): its
      // write-back only writes; the sums moved into the round, timed here over the round's parts.
      const w = timed(() => region.writeFrom(mean, r + 1, scratch))
      const landed = new DistanceSum()
      const l = timed(() => { for (let at = 0; at < n; at += LANDED_PART) landed.add(values.subarray(at, at + LANDED_PART), mean[0].subarray(at, at + LANDED_PART)) })
      if (keep) {
        rows['write-back (every part landed)'].push(w.sample)
        rows['sums at landing (in the round)'].push(l.sample)
      }
      // Put the trainer's values back for the next repetition.
      writeFileSync(join(dir, 'r'), file)
    }
    region.close()
    console.log(`region of ${mib} MiB ${dtype} (${n} values), median of ${reps} repetitions, divergence ${divergence}`)
    console.log('| pass | wall ms | CPU ms |')
    console.log('|---|---:|---:|')
    // **all**: the passes of a step whose round kept parts local (the write-back reads the region again);
    // **all, every part landed**: those of a whole round, outside the round itself.
    const totals = { all: { wall: 0, cpu: 0 }, landed: { wall: 0, cpu: 0 } }
    for (const [name, samples] of Object.entries(rows)) {
      if (samples.length === 0) continue
      const w = median(samples.map(s => s.wall))
      const c = median(samples.map(s => s.cpu))
      if (name === 'check' || name === 'copyIn' || name === 'write-back + distance') { totals.all.wall += w; totals.all.cpu += c }
      if (name === 'check' || name === 'copyIn' || name === 'write-back (every part landed)') { totals.landed.wall += w; totals.landed.cpu += c }
      console.log(`| ${name} | ${w.toFixed(1)} | ${c.toFixed(1)} |`)
    }
    console.log(`| **all** | ${totals.all.wall.toFixed(1)} | ${totals.all.cpu.toFixed(1)} |`)
    console.log(`| **all, every part landed** | ${totals.landed.wall.toFixed(1)} | ${totals.landed.cpu.toFixed(1)} |`)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

void main()
