/**
 * The measured part of bench:checkpoint (bench/checkpoint-rounds.ts): two peers in this process, each
 * a libp2p node on loopback with a DecentralizedAverager, average back to back; in a checkpoint mode
 * both hand every round to the agent's own Checkpointer (every = 1) exactly as the sidecar workload
 * does, so what is measured is what the product pays: the writer's snapshot copy in the round, the
 * background write (sha256 on this event loop, fsyncs) overlapping the next rounds.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { join } from 'node:path'
import type { SwarmNode } from '../../agent/net/node.js'
import { DecentralizedAverager, DEFAULT_AVERAGER_CONFIG, type NamedTensor } from '../../agent/averager.js'
import { Checkpointer, type CompletedRound } from '../../agent/checkpoint/checkpointer.js'
import type { TensorSource } from '../../agent/checkpoint/safetensors.js'
import { sharedCopy } from '../../agent/checkpoint/sha256-off-thread.js'
import { AgentMetrics } from '../../agent/metrics/agent-metrics.js'
import { startConnectedNodes } from './loopback-nodes.js'

export const SWARM = 'bench'
/** Tensors of at most 16M values, like a transformer's layers (and bench/checkpoint-write.ts). */
export const MAX_TENSOR = 16 << 20

/** Peer p's start at element j of tensor t: multiples of 1/8 below 128, so every mean is exact in float32. */
export const startValue = (p: number, t: number, j: number): number => ((j * 7 + t * 13 + p * 3) & 1023) / 8
/** Before round r (of a mode) peer p sets element 0 of every tensor to this, so each round's average differs. */
export const markOf = (p: number, r: number): number => 10 * r + p
/** Every value both peers hold after round r: what a checkpoint of round r must contain. */
export const averagedValue = (t: number, j: number, r: number): number =>
  j === 0 ? (markOf(0, r) + markOf(1, r)) / 2 : (startValue(0, t, j) + startValue(1, t, j)) / 2

export function tensorSizes (elements: number): number[] {
  const sizes: number[] = []
  for (let at = 0; at < elements; at += MAX_TENSOR) sizes.push(Math.min(MAX_TENSOR, elements - at))
  return sizes
}

export interface Pair {
  readonly nodes: SwarmNode[]
  readonly averagers: DecentralizedAverager[]
  stop(): Promise<void>
}

/** Two connected nodes (Kademlia tables filled) with an averager each. */
export async function startPair (elements: number): Promise<Pair> {
  const nodes: SwarmNode[] = []
  const averagers: DecentralizedAverager[] = []
  const stop = async (): Promise<void> => {
    await Promise.allSettled(averagers.map(async a => { await a.shutdown() }))
    await Promise.allSettled(nodes.map(async n => { await n.stop() }))
  }
  try {
    nodes.push(...await startConnectedNodes(2, () => ({ rendezvous: { requestTimeoutMs: 2000 } })))
    for (let p = 0; p < 2; p++) {
      const tensors: NamedTensor[] = tensorSizes(elements).map((n, t) => {
        const data = new Float32Array(n)
        for (let j = 0; j < n; j++) data[j] = startValue(p, t, j)
        return { name: `layer.${t}`, shape: [n], data }
      })
      averagers.push(await DecentralizedAverager.create(nodes[p], tensors, {
        ...DEFAULT_AVERAGER_CONFIG,
        prefix: 'bench-ckpt',
        targetGroupSize: 2,
        minGroupSize: 2,
        averagingExpiration: 5,
        requestTimeout: 2,
        allreduceTimeout: 240,
        dataHost: '127.0.0.1'
      }))
    }
    return { nodes, averagers, stop }
  } catch (err) {
    await stop()
    throw err
  }
}

export type Mode = 'none' | 'shm' | 'disk'

export interface ModeResult {
  readonly mode: Mode
  readonly folder: string | null
  /** Wall ms of each measured round: both peers' step and afterRound. */
  readonly roundMs: number[]
  /** Seconds of each write the Checkpointer timed (its histogram's observations), rounds started in the measured window. */
  readonly writeSeconds: number[]
  readonly snapshotMs: number[]
  readonly written: number
  readonly skipped: number
  readonly failed: number
  readonly lastWritten: number | null
  /** Measured rounds plus the wait for the last write: the window the CPU seconds cover. */
  readonly wallS: number
  readonly cpuS: number
}

export interface ModeOptions {
  readonly mode: Mode
  readonly rounds: number
  readonly warmup: number
  /** Parent of the checkpoint folder (a fresh one per mode, removed after unless keep). */
  readonly parent?: string
  readonly keep?: boolean
  readonly log?: (line: string) => void
}

/** Runs warm-up + measured rounds of one mode on a started pair. */
export async function runMode (pair: Pair, o: ModeOptions): Promise<ModeResult> {
  const folder = o.parent !== undefined ? await mkdtemp(join(o.parent, 'avs-ckpt-rounds-')) : null
  const firstMeasured = o.warmup + 1
  // A write's seconds go to the histogram just before its "checkpointed round n" line: pair them there.
  let observed = NaN
  const writes: Array<{ round: number, seconds: number }> = []
  const failures: number[] = []
  const checkpointers = folder === null
    ? []
    : pair.averagers.map(() => {
      const metrics = new AgentMetrics(SWARM)
      const observe = metrics.checkpointSeconds.observe.bind(metrics.checkpointSeconds) as (v: number) => void
      metrics.checkpointSeconds.observe = ((v: number) => { observed = v; observe(v) }) as typeof metrics.checkpointSeconds.observe
      return new Checkpointer({ store: { kind: 'folder', dir: folder }, every: 1, keep: 3 }, SWARM, metrics, {
        info: (m) => {
          const written = /^checkpointed round (\d+) /.exec(m)
          if (written !== null) writes.push({ round: Number(written[1]), seconds: observed })
          o.log?.(m)
        },
        warn: (m) => {
          const failed = /^checkpoint of round (\d+) failed/.exec(m)
          if (failed !== null) failures.push(Number(failed[1]))
          o.log?.(m)
        }
      })
    })
  const snapshotMs: number[] = []
  let skipped = 0
  const roundMs: number[] = []
  let started = 0
  let cpu = process.cpuUsage()
  try {
    for (let r = 1; r <= o.warmup + o.rounds; r++) {
      if (r === firstMeasured) {
        // The warm-up's write (the first one pays for loading and warming its code) ends before measuring.
        await Promise.all(checkpointers.map(async c => { await c.drain() }))
        started = performance.now()
        cpu = process.cpuUsage()
      }
      const t0 = performance.now()
      await Promise.all(pair.averagers.map(async (averager, p) => {
        await averager.withTensors(ts => { for (const t of ts) t.data[0] = markOf(p, r) })
        const result = await averager.step({ timeout: 300 })
        if (result.allreduce.partsKeptLocal > 0) throw new Error(`round ${r}: ${result.allreduce.partsKeptLocal} parts were not averaged`)
        const checkpointer = checkpointers[p]
        if (checkpointer === undefined) return
        const completed: CompletedRound = { round: r, peers: result.peers, self: pair.nodes[p].peerId.toString(), samples: r }
        let took = false
        // The sidecar workload's snapshot (sidecar-api.ts): a copy of the averaged tensors under the tensor lock.
        const copy = async (): Promise<TensorSource[]> => {
          took = true
          const s0 = performance.now()
          const tensors = await averager.withTensors(ts => ts.map(t => ({ name: t.name, dtype: 'float32' as const, shape: t.shape, data: sharedCopy(t.data) })))
          if (r >= firstMeasured) snapshotMs.push(performance.now() - s0)
          return tensors
        }
        // No `hold`: a copy is always taken, so this measures the copy-and-write-behind path whatever the memory.
        await checkpointer.afterRound(completed, { bytes: 1, copy })
        // The writer whose snapshot was not taken skipped the round: its previous write was still running.
        if (checkpointer.writes(completed) && !took && r >= firstMeasured) skipped++
      }))
      if (r >= firstMeasured) roundMs.push(performance.now() - t0)
    }
    await Promise.all(checkpointers.map(async c => { await c.drain() }))
    const used = process.cpuUsage(cpu)
    const measured = writes.filter(w => w.round >= firstMeasured)
    return {
      mode: o.mode,
      folder,
      roundMs,
      writeSeconds: measured.map(w => w.seconds),
      snapshotMs,
      written: measured.length,
      skipped,
      failed: failures.filter(r => r >= firstMeasured).length,
      lastWritten: writes.at(-1)?.round ?? null,
      wallS: (performance.now() - started) / 1000,
      cpuS: (used.user + used.system) / 1e6
    }
  } finally {
    await Promise.all(checkpointers.map(async c => { await c.drain() }))
    if (folder !== null && o.keep !== true) await rm(folder, { recursive: true, force: true })
  }
}

export const median = (xs: readonly number[]): number => {
  if (xs.length === 0) return NaN
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 === 1 ? s[m] : (s[m - 1] + s[m]) / 2
}
