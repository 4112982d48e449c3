/** One row of the shaped-links benchmark: fresh namespaces and links, one runner run, torn down. */
import { mkdirSync, writeFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { implNamed, type ImplSpec } from './impls.js'
import { ROOT, progress, runImpl, type Placement } from './run-impl.js'
import { statsOf, type RunOutcome } from './report.js'
import { createShapedLinks, type ShapedLinks } from './shaped-links.js'
import { bestSplitFloor, bytesPerElement, equalSplitFloor, wireFloorSeconds } from './links-math.js'
import type { LinksRow } from './links-report.js'
import { flowRows, flowTable, startFlowSampler, type FlowRow, type FlowSampler } from './flow-sampler.js'

export interface RateChange { beforeRound: number, peer: number, mbit: number }

export interface LinksRowOptions {
  readonly profile: string
  readonly rates: readonly number[]
  readonly impl: string
  readonly codec: string
  readonly elements: number
  readonly rounds: number
  readonly warmup: number
  readonly changes: readonly RateChange[]
  readonly timeoutS: number
  readonly logs: string
  /** Interface and namespace name prefix, ≤ 6 characters, unique among concurrent runs. */
  readonly tag: string
  /** Set in every peer's namespace (sysctl -w KEY=VALUE). */
  readonly sysctls?: readonly string[]
  /** Sample every flow's progress (ss) this often, in ms; tables per measured round and the samples go next to the logs. */
  readonly flowsEveryMs?: number
  /** Told the links while they exist, so a signal handler can tear them down. */
  readonly onLinks?: (links: ShapedLinks | undefined) => void
}

/** `ours-declared`: bandwidth set by hand to the true rates; `ours-equal`: the same for all (spans equal); `ours`: measured. */
function specFor (name: string): ImplSpec {
  if (name === 'ours-declared' || name === 'ours-equal') return { ...implNamed('ours'), name }
  return implNamed(name)
}

/** Codecs an implementation can run: gloo and the TCP pattern move float32 only; auto is ours alone. */
export function codecsOf (impl: string, asked: readonly string[]): string[] {
  if (impl === 'gloo' || impl === 'tcp') return ['none']
  if (impl === 'hivemind') return asked.filter(c => c !== 'auto')
  return [...asked]
}

export async function runLinksRow (o: LinksRowOptions): Promise<LinksRow> {
  const { profile, rates, impl, codec, elements, rounds, warmup, changes } = o
  // Fresh namespaces per row: a rate changed mid-run or a stuck peer never leaks into the next row.
  const links = await createShapedLinks(o.tag, 1 + (process.pid % 200), rates, o.sysctls)
  o.onLinks?.(links)
  const logDir = resolve(ROOT, o.logs, `${profile.replace(/,/g, '-')}-${impl}-${codec}`)
  mkdirSync(logDir, { recursive: true })
  const sampler: FlowSampler | undefined = o.flowsEveryMs !== undefined ? startFlowSampler(links.namespaces, o.flowsEveryMs) : undefined
  const marks = new Map<string, number>()
  let before: Array<{ sent: number, received: number }> = []
  let moved: Array<{ sent: number, received: number }> = []
  const placement: Placement = {
    coordHost: links.gateway,
    wireMeter: false,
    wrap: (rank) => ['ip', 'netns', 'exec', links.namespaces[rank]],
    env: (rank) => ({
      BENCH_HOST: links.addrs[rank],
      ...(impl === 'ours-declared' ? { BENCH_BANDWIDTH: String(rates[rank] * 1e6 / 8) } : {}),
      ...(impl === 'ours-equal' ? { BENCH_BANDWIDTH: '1' } : {})
    }),
    async onBarrier (name) {
      if (sampler !== undefined) marks.set(name, sampler.now())
      const round = /^round-(\d+)$/.exec(name)
      if (round != null) {
        for (const c of changes.filter(c => c.beforeRound === Number(round[1]))) {
          await links.setRate(c.peer, c.mbit)
          progress(`${profile} ${impl}: peer ${c.peer}'s link set to ${c.mbit} Mbit/s before round ${c.beforeRound}`)
        }
      }
      if (name === `round-${warmup}`) before = await links.counters()
      if (name === 'done') moved = (await links.counters()).map((c, i) => ({ sent: c.sent - before[i].sent, received: c.received - before[i].received }))
    }
  }
  let outcome: RunOutcome
  let flows: FlowRow[][] | undefined
  try {
    outcome = await runImpl(specFor(impl), rates.length, rates.length, elements, {
      rounds, warmup, partBytes: 65536, compression: codec, timeoutS: o.timeoutS, logDir, placement
    })
  } finally {
    if (sampler !== undefined) flows = writeFlows(logDir, await sampler.stop(), links.addrs, marks, warmup, rounds)
    await links.destroy()
    o.onLinks?.(undefined)
  }
  const bytes = elements * bytesPerElement(codec)
  return {
    profile, rates, impl, codec, logDir, outcome, stats: statsOf(outcome), flows,
    floorEqualS: equalSplitFloor(bytes, rates),
    floorBestS: bestSplitFloor(bytes, rates),
    movedBytesPerRoundPerPeer: moved.length > 0 ? moved.reduce((s, m) => s + m.sent + m.received, 0) / moved.length / rounds : null,
    wireFloorS: moved.length > 0 ? wireFloorSeconds(moved, rates, rounds) : null
  }
}

/** Per measured round, each sender→receiver pair's bytes and timing (flows.md), and every sample (flows.csv). */
function writeFlows (dir: string, samples: Awaited<ReturnType<FlowSampler['stop']>>, addrs: readonly string[], marks: ReadonlyMap<string, number>, warmup: number, rounds: number): FlowRow[][] {
  const tables: string[] = []
  const perRound: FlowRow[][] = []
  for (let r = warmup; r < warmup + rounds; r++) {
    const from = marks.get(`round-${r}`)
    const to = marks.get(r + 1 < warmup + rounds ? `round-${r + 1}` : 'done')
    if (from === undefined || to === undefined) continue
    const rows = flowRows(samples, addrs, from, to)
    perRound.push(rows)
    tables.push(flowTable(`Round ${r} (${((to - from) / 1000).toFixed(2)} s from its barrier to the next; times from that barrier)`, rows, addrs.length, to - from))
  }
  writeFileSync(resolve(dir, 'flows.md'), tables.join('\n\n') + '\n')
  const csv = ['t_ms,rank,local,remote,bytes_acked,bytes_received,cwnd,rtt_ms']
  samples.forEach((own, rank) => { for (const s of own) csv.push(`${s.t.toFixed(0)},${rank},${s.local},${s.remote},${s.acked},${s.received},${s.cwnd ?? ''},${s.rttMs ?? ''}`) })
  writeFileSync(resolve(dir, 'flows.csv'), csv.join('\n') + '\n')
  progress(`per-flow progress: ${resolve(dir, 'flows.md')}`)
  return perRound
}
