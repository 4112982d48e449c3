/**
 * Moshpit rounds over a ScaleSwarm: every live peer steps once per round, some crash once their
 * group assembled, and each round is measured: distance to the live mean (largest, and the variance),
 * the groups that formed and whether they mixed the last round's, matchmaking latency, rendezvous
 * exchanges and DHT lookups, control traffic per peer, wall and CPU time.
 */
import type { StepResult } from '../../agent/averager.js'
import type { ScaleSwarm, TrafficCounter } from './scale-swarm.js'
import { seededRandom, shuffle } from '../../agent/util/random.js'
import { distanceToMean } from './moshpit-math.js'

export interface RoundStats {
  readonly round: number
  readonly live: number
  readonly crashed: number
  /** Peers whose step found no group or failed. */
  readonly failedSteps: number
  /** Peers whose step averaged only in part (parts kept local, a sender left out): such a round is not its group's exact mean. */
  readonly partialSteps: number
  /** Of those: steps that kept parts local (a reducer failed, unrepaired); that left a sender out of a span they reduced. */
  readonly keptLocalSteps: number
  readonly senderLeftOutSteps: number
  /** Steps whose group repaired a failed reducer's span after the round (agent/allreduce/repair.ts). */
  readonly repairedSteps: number
  /** Groups by size: size → count. */
  readonly groupSizes: ReadonlyMap<number, number>
  /** Member pairs of this round's groups that were also together last round, of all pairs. */
  readonly repeatedPairs: number
  readonly pairs: number
  /** Largest |x − live mean| over every live peer and element after the round (float64 mean). */
  readonly deviation: number
  /**
   * Mean over every live peer and element of (x − live mean)² after the round, in float64:
   * Σ_live Σ_elements (x − mean)² ÷ (live × elements). The Moshpit paper's measure (its aims,
   * e.g. "1e-4 within d + 1 rounds", are variances), far below deviation² once a few peers lag.
   */
  readonly variance: number
  readonly matchmakingP50: number
  readonly matchmakingP95: number
  readonly exchanges: number
  /** Exchanges in which at least one replica failed; in which all did. */
  readonly exchangesDegraded: number
  readonly exchangesFailed: number
  readonly exchangeP50: number
  readonly exchangeP95: number
  /** Mean hops per exchange: 1 when the first replicas asked were the key's closest peers. */
  readonly exchangeHops: number
  readonly lookups: number
  readonly lookupsFailed: number
  readonly lookupP50: number
  readonly lookupP95: number
  /** Per live peer this round: messages and bytes our control protocols sent (rendezvous, join, DHT, identify). */
  readonly controlMessages: number
  readonly controlBytes: number
  readonly wallMs: number
  readonly cpuS: number
}

/** What the rendezvous observer collects between two rounds. */
export class RoundProbe {
  exchanges: Array<{ ms: number, failed: number, replicas: number, hops: number }> = []
  lookups: Array<{ ms: number, ok: boolean }> = []
  readonly observer = {
    exchange: (o: { ms: number, failed: number, replicas: number, hops: number }) => { this.exchanges.push(o) },
    lookup: (o: { ms: number, ok: boolean }) => { this.lookups.push(o) }
  }

  take (): { exchanges: RoundProbe['exchanges'], lookups: RoundProbe['lookups'] } {
    const out = { exchanges: this.exchanges, lookups: this.lookups }
    this.exchanges = []
    this.lookups = []
    return out
  }
}

export interface RoundOptions {
  readonly maxRounds: number
  /** Fraction of the live peers that crash in each round, once their group assembled. */
  readonly crashRate: number
  readonly threshold: number
  readonly stepTimeout: number
  readonly seed: number
  readonly probe: RoundProbe
  readonly traffic?: TrafficCounter
  /** Set by the caller's onGroup hook: whether a peer is to crash this round (then it crashes). */
  readonly victims: Set<number>
  readonly progress?: (line: string) => void
  /** Sees each round's step results by rank, with every peer's tensor before the round and why the other live peers' steps failed. */
  readonly onRound?: (round: number, results: ReadonlyMap<number, StepResult>, before: readonly Float32Array[], failures: ReadonlyMap<number, string>) => void
}

/** Runs rounds until the live peers agree within the threshold or rounds run out. */
export async function runRounds (swarm: ScaleSwarm, options: RoundOptions): Promise<{ rounds: RoundStats[], convergedAt: number | null }> {
  const dead = new Set<number>()
  const rounds: RoundStats[] = []
  let lastTogether = new Map<string, string>()
  const random = seededRandom(`${options.seed}:crashes`)
  options.probe.take()
  let trafficBefore = options.traffic?.snapshot()
  for (let round = 1; round <= options.maxRounds; round++) {
    const live = swarm.averagers.map((_, i) => i).filter(i => !dead.has(i))
    options.victims.clear()
    for (const v of pickVictims(live, options.crashRate, random)) options.victims.add(v)
    const before = swarm.tensors.map(t => t.slice())
    const wallStart = performance.now()
    const cpuStart = process.cpuUsage()
    const outcomes = await Promise.allSettled(live.map(async i => await swarm.averagers[i].step({ timeout: options.stepTimeout })))
    const wallMs = performance.now() - wallStart
    const cpu = process.cpuUsage(cpuStart)
    for (const v of options.victims) dead.add(v)
    const steps = new Map<number, StepResult>()
    const failures = new Map<number, string>()
    outcomes.forEach((o, k) => {
      if (dead.has(live[k])) return
      if (o.status === 'fulfilled') steps.set(live[k], o.value)
      else failures.set(live[k], o.reason instanceof Error ? o.reason.message : String(o.reason))
    })
    options.onRound?.(round, steps, before, failures)
    const results = new Map([...steps].map(([rank, r]) => [rank, roundResult(r)]))
    const probe = options.probe.take()
    const trafficNow = options.traffic?.snapshot()
    const control = controlTraffic(trafficBefore, trafficNow)
    trafficBefore = trafficNow
    const { stats, together } = roundStats({
      round, live, crashed: options.victims.size, dead, results, tensors: swarm.tensors, ...probe, control, wallMs, cpuS: (cpu.user + cpu.system) / 1e6
    }, lastTogether)
    lastTogether = together
    rounds.push(stats)
    options.progress?.(formatRound(stats))
    if (stats.deviation < options.threshold) return { rounds, convergedAt: round }
  }
  return { rounds, convergedAt: null }
}

/** This round's victims: a seeded share of the live peers (the same draw in one process or several). */
export function pickVictims (live: readonly number[], crashRate: number, random: () => number): number[] {
  return shuffle([...live], random).slice(0, Math.round(crashRate * live.length))
}

/** What roundStats needs of one step's result (a worker process sends this much). */
export type RoundResult = Pick<StepResult, 'groupId' | 'peers' | 'matchmakingMs'> & {
  readonly partial: boolean
  /** Why partial: parts kept local, a sender left out; and whether a failed reducer's span was repaired. */
  readonly keptLocal: boolean
  readonly senderLeftOut: boolean
  readonly repaired: boolean
}

export function roundResult (r: StepResult): RoundResult {
  const keptLocal = r.allreduce.partsKeptLocal > 0
  const senderLeftOut = r.allreduce.bannedSenders.length > 0
  return { groupId: r.groupId, peers: [...r.peers], matchmakingMs: r.matchmakingMs, partial: keptLocal || senderLeftOut, keptLocal, senderLeftOut, repaired: r.allreduce.repairedParts > 0 }
}

/** What a round left, wherever its peers ran: the input of roundStats. */
export interface RoundOutcome {
  readonly round: number
  /** Ranks that stepped this round (live at its start). */
  readonly live: readonly number[]
  readonly crashed: number
  /** Every rank dead after the round, this round's victims included. */
  readonly dead: ReadonlySet<number>
  /** The steps that returned, of ranks still alive, by rank. */
  readonly results: ReadonlyMap<number, RoundResult>
  /** Every rank's tensor after the round (those of dead ranks are not read). */
  readonly tensors: readonly Float32Array[]
  readonly exchanges: RoundProbe['exchanges']
  readonly lookups: RoundProbe['lookups']
  /** Control traffic of the round, all peers together. */
  readonly control: { bytes: number, messages: number }
  readonly wallMs: number
  readonly cpuS: number
}

/** A round's figures; `lastTogether` (peer → group id of the round before) gives the repeated pairs. */
export function roundStats (o: RoundOutcome, lastTogether: ReadonlyMap<string, string>): { stats: RoundStats, together: Map<string, string> } {
  const survivors = o.live.filter(i => !o.dead.has(i))
  const groups = new Map<string, readonly string[]>()
  for (const r of o.results.values()) groups.set(r.groupId, r.peers)
  const groupSizes = new Map<number, number>()
  for (const peers of groups.values()) groupSizes.set(peers.length, (groupSizes.get(peers.length) ?? 0) + 1)
  let pairs = 0; let repeated = 0
  const together = new Map<string, string>()
  for (const [id, peers] of groups) {
    for (const p of peers) together.set(p, id)
    for (let a = 0; a < peers.length; a++) {
      for (let b = a + 1; b < peers.length; b++) {
        pairs++
        const before = lastTogether.get(peers[a])
        if (before !== undefined && before === lastTogether.get(peers[b])) repeated++
      }
    }
  }
  const { deviation, variance } = distanceToMean(survivors.map(i => o.tensors[i]))
  const mm = [...o.results.values()].map(r => r.matchmakingMs)
  const ex = o.exchanges.map(e => e.ms)
  const lk = o.lookups.map(l => l.ms)
  const stats: RoundStats = {
    round: o.round,
    live: survivors.length,
    crashed: o.crashed,
    failedSteps: survivors.length - o.results.size,
    partialSteps: [...o.results.values()].filter(r => r.partial).length,
    keptLocalSteps: [...o.results.values()].filter(r => r.keptLocal).length,
    senderLeftOutSteps: [...o.results.values()].filter(r => r.senderLeftOut).length,
    repairedSteps: [...o.results.values()].filter(r => r.repaired).length,
    groupSizes,
    repeatedPairs: repeated,
    pairs,
    deviation,
    variance,
    matchmakingP50: quantile(mm, 0.5),
    matchmakingP95: quantile(mm, 0.95),
    exchanges: o.exchanges.length,
    exchangesDegraded: o.exchanges.filter(e => e.failed > 0).length,
    exchangesFailed: o.exchanges.filter(e => e.failed === e.replicas).length,
    exchangeP50: quantile(ex, 0.5),
    exchangeP95: quantile(ex, 0.95),
    exchangeHops: o.exchanges.reduce((a, e) => a + e.hops, 0) / Math.max(1, o.exchanges.length),
    lookups: o.lookups.length,
    lookupsFailed: o.lookups.filter(l => !l.ok).length,
    lookupP50: quantile(lk, 0.5),
    lookupP95: quantile(lk, 0.95),
    controlMessages: o.control.messages / Math.max(1, o.live.length),
    controlBytes: o.control.bytes / Math.max(1, o.live.length),
    wallMs: o.wallMs,
    cpuS: o.cpuS
  }
  return { stats, together }
}

/** Protocols that are control traffic: everything but the tensor parts (and the connections' own totals). */
export function controlTraffic (before: Map<string, { bytes: number, messages: number }> | undefined, now: Map<string, { bytes: number, messages: number }> | undefined): { bytes: number, messages: number } {
  let bytes = 0; let messages = 0
  for (const [protocol, v] of now ?? []) {
    if (protocol === 'connections' || protocol.includes('/aggregate')) continue
    const b = before?.get(protocol)
    bytes += v.bytes - (b?.bytes ?? 0)
    messages += v.messages - (b?.messages ?? 0)
  }
  return { bytes, messages }
}

export function quantile (values: readonly number[], q: number): number {
  if (values.length === 0) return NaN
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]
}

export function formatSizes (sizes: ReadonlyMap<number, number>): string {
  return [...sizes].sort((a, b) => b[0] - a[0]).map(([size, count]) => `${count}×${size}`).join(' ')
}

export function formatRound (s: RoundStats): string {
  return `round ${s.round}: live ${s.live} (crashed ${s.crashed}), groups ${formatSizes(s.groupSizes) || '-'}, no group ${s.failedSteps}, partial ${s.partialSteps} (kept parts local ${s.keptLocalSteps}, left a sender out ${s.senderLeftOutSteps}), repaired ${s.repairedSteps}, ` +
    `repeated pairs ${s.repeatedPairs}/${s.pairs}, deviation ${s.deviation.toExponential(2)}, variance ${s.variance.toExponential(2)}, matchmaking p50/p95 ${s.matchmakingP50.toFixed(0)}/${s.matchmakingP95.toFixed(0)} ms, ` +
    `rendezvous ${s.exchanges} (degraded ${s.exchangesDegraded}, failed ${s.exchangesFailed}) p50/p95 ${s.exchangeP50.toFixed(0)}/${s.exchangeP95.toFixed(0)} ms, ${s.exchangeHops.toFixed(2)} hops, ` +
    `lookups ${s.lookups} (failed ${s.lookupsFailed}) p50/p95 ${s.lookupP50.toFixed(0)}/${s.lookupP95.toFixed(0)} ms, ` +
    `control ${s.controlMessages.toFixed(0)} msgs ${(s.controlBytes / 1024).toFixed(1)} KiB per peer, ${(s.wallMs / 1000).toFixed(1)} s wall, ${s.cpuS.toFixed(1)} CPU s`
}
