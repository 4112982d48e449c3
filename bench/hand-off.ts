/**
 * A preemption notice shorter than the round, against a kill at the same moment (npm run
 * bench:hand-off -- --help). N agents in one process, real libp2p and the direct TLS data channel
 * on loopback, one group of N; the last agent leaves once it has reduced a fraction --at of its span:
 * - hand-off: its leave notice runs out there (DecentralizedAverager.leaveBy): it stops its span,
 *   tells each sender where, and the others average the rest among themselves (span repair);
 * - kill: its libp2p node and data channel stop there, every connection torn down at once as a
 *   crashed process's kernel would: the others keep the rest of its span local.
 * Per run: the parts the others kept local and repaired, how far apart they ended (the largest
 * difference between two of them on one element), and the time from the leave to the end of their
 * steps. One process on this machine's cores: times are the protocol's on loopback, not a link's.
 */
import { Command } from 'commander'
import type { SwarmNode } from '../agent/net/node.js'
import { DecentralizedAverager, DEFAULT_AVERAGER_CONFIG, type StepResult } from '../agent/averager.js'
import { numberList } from './lib/cli.js'
import { parseElements, formatElements } from './lib/report.js'
import { fillTensor } from './lib/protocol.js'
import { startConnectedNodes } from './lib/loopback-nodes.js'

type Variant = 'hand-off' | 'kill'

interface RunResult {
  readonly variant: Variant
  readonly at: number
  /** Parts of the leaver's span reduced when it left, of how many. */
  readonly reduced: number
  readonly span: number
  readonly keptLocal: number[]
  readonly repaired: number[]
  readonly disagreement: number
  readonly afterLeaveMs: number
  readonly cpuMs: number
}

async function runOnce (variant: Variant, at: number, o: { peers: number, elements: number, partBytes: number }): Promise<RunResult> {
  // Every pair connected, every routing table full (a swarm of at most 21 is meshed).
  const nodes = await startConnectedNodes(o.peers, () => ({ rendezvous: { requestTimeoutMs: 2000 } }))
  const averagers: DecentralizedAverager[] = []
  try {
    for (let p = 0; p < o.peers; p++) {
      // The bench peers' values (rank + 1 + a ramp): distinct per peer, so a span kept local shows as disagreement.
      const data = new Float32Array(o.elements)
      fillTensor(data, p)
      averagers.push(await DecentralizedAverager.create(nodes[p], [{ name: 'x', shape: [o.elements], data }], {
        ...DEFAULT_AVERAGER_CONFIG, prefix: 'hand-off', targetGroupSize: o.peers, minGroupSize: o.peers,
        averagingExpiration: 8, requestTimeout: 2, allreduceTimeout: 120, partSizeBytes: o.partBytes, dataHost: '127.0.0.1'
      }))
    }
    const l = o.peers - 1
    const leaver = averagers[l]
    const cpu = process.cpuUsage()
    const ends: number[] = []
    const stepping = Promise.all(averagers.slice(0, l).map(async a => await a.step({ timeout: 300 }).finally(() => { ends.push(Date.now()) })))
    const leaving = leaver.step({ timeout: 300 }).then((r: StepResult) => r, (err: Error) => err)
    let progress
    for (;;) {
      progress = leaver.spanProgress
      if (progress !== undefined && progress.span > 0 && progress.reduced >= at * progress.span) break
      await new Promise(resolve => setTimeout(resolve, 1))
    }
    const leftAt = Date.now()
    // The kill: the node's stop tears down its connections and the averager's data channels with it.
    if (variant === 'hand-off') leaver.leaveBy(leftAt)
    else await nodes[l].stop()
    const results = await stepping
    await leaving
    const used = process.cpuUsage(cpu)
    const tensors = await Promise.all(averagers.slice(0, l).map(async a => await a.withTensors(ts => ts[0].data.slice())))
    let disagreement = 0
    for (let i = 0; i < o.elements; i++) {
      let lo = Infinity; let hi = -Infinity
      for (const t of tensors) { lo = Math.min(lo, t[i]); hi = Math.max(hi, t[i]) }
      disagreement = Math.max(disagreement, hi - lo)
    }
    return {
      variant, at, reduced: progress.reduced, span: progress.span,
      keptLocal: results.map(r => r.allreduce.partsKeptLocal),
      repaired: results.map(r => r.allreduce.repairedParts),
      disagreement,
      afterLeaveMs: Math.max(...ends) - leftAt,
      cpuMs: (used.user + used.system) / 1000
    }
  } finally {
    await Promise.allSettled(averagers.map(async a => { await a.shutdown() }))
    await Promise.allSettled(nodes.map(async n => { await n.stop() }))
  }
}

async function main (): Promise<void> {
  const o = new Command()
    .name('bench:hand-off')
    .description('A member leaving mid-span: its span handed off (a leave notice) against a kill at the same part.')
    .option('--peers <n>', 'agents, in one group', '4')
    .option('--elements <n>', 'float32 values per agent (25M, 4M, 1000000)', '8M')
    .option('--part-bytes <n>', 'bytes per streamed part (the agent\'s default 64 KiB)', '65536')
    .option('--at <list>', 'fractions of its span the leaver had reduced when it left', '0.25,0.5,0.75')
    .option('--runs <n>', 'runs per variant and fraction', '3')
    .parse()
    .opts<Record<string, string>>()
  const peers = numberList(o.peers, '--peers', 3, 16)[0]
  const elements = parseElements(o.elements)
  const partBytes = numberList(o.partBytes, '--part-bytes', 256, 16 * 1024 * 1024)[0]
  const fractions = numberList(o.at, '--at', 0, 0.99)
  const runs = numberList(o.runs, '--runs', 1, 100)[0]
  console.log(`${peers} agents × ${formatElements(elements)} float32, parts of ${partBytes} B, one process, loopback: the last agent leaves mid-span.\n`)
  console.log('| variant | left at (of its span) | run | parts of its span reduced | parts kept local, per member left | parts repaired, per member left | largest difference between members left | leave → their steps ended (ms) | CPU s |')
  console.log('|---|---:|---:|---:|---|---|---:|---:|---:|')
  for (const at of fractions) {
    for (let run = 1; run <= runs; run++) {
      for (const variant of ['hand-off', 'kill'] as const) {
        const r = await runOnce(variant, at, { peers, elements, partBytes })
        console.log(`| ${r.variant} | ${at} | ${run} | ${r.reduced} of ${r.span} | ${r.keptLocal.join(', ')} | ${r.repaired.join(', ')} | ${r.disagreement.toExponential(1)} | ${r.afterLeaveMs} | ${(r.cpuMs / 1000).toFixed(2)} |`)
      }
    }
  }
}

main().then(() => { process.exit(0) }, (err: unknown) => { process.stderr.write(`bench:hand-off: ${(err as Error).message}\n`); process.exit(1) })
