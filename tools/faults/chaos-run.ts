import { appendFileSync, mkdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { seededRandom } from '../../agent/util/random.js'
import { startStaticDns } from '../../cli/local/dns.js'
import { AGENT_MAIN, AgentProcess, stopAgents } from '../../agent/process/agent-process.js'
import { buildSidecarSwarm, type SwarmTiming } from './sidecar-swarm.js'
import { runTrainer, type StartRecord, type StepRecord } from './sidecar-trainer.js'
import { spread, rises } from './consensus.js'
import { freePorts } from '../../agent/util/ports.js'
import { stalledWithin, StallWatch, type Stall } from './stall-watch.js'

/** kill: SIGKILL, then a new process; term: SIGTERM (a spot or preemption notice: graceful leave), then a new process; stop: SIGSTOP, then SIGCONT. */
export type FaultKind = 'kill' | 'term' | 'stop'
export const FAULT_KINDS: readonly FaultKind[] = ['kill', 'term', 'stop']

export interface ChaosOptions {
  readonly agents: number
  readonly bootstrap: number
  /** Steps each agent attempts, across its restarts. */
  readonly rounds: number
  readonly seed: string
  /** float32 values in the averaged tensor. */
  readonly elements: number
  readonly periodMs: number
  readonly timing: SwarmTiming
  /** Faults to inject, in order; random kinds when only a count is given. */
  readonly faults: readonly FaultKind[] | number
  /** Longest wait for every agent's first averaged step before the faults begin (ms). */
  readonly warmupLimitMs: number
  /** Pause between one fault's end and the next one's start (ms, randomised ±50%). */
  readonly faultGapMs: number
  /** Faults start every faultGapMs from the first one, on a fixed clock (the anchors' "one every 15 s"), instead of a random gap after the previous one ended. */
  readonly fixedCadence?: boolean
  /** Trainers train while their step runs (TrainerOptions.overlap). */
  readonly overlap?: boolean
  /** How long SIGSTOP lasts before SIGCONT (ms, randomised ±30%). */
  readonly freezeMs: number
  /** How long a killed agent stays down before its new process starts (ms). */
  readonly restartDelayMs: number
  /** Third octet of the 127.77.x.0/24 loopback addresses the agents use. */
  readonly subnet: number
  /** Allowance over a step's bound for the sidecar's HTTP and JSON on a loaded machine (ms). */
  readonly slackMs: number
  readonly outDir: string
  /** The agents' log level (default info). */
  readonly logLevel?: string
  /** Run the agents from dist/agent/main.js as tsc leaves it (~970 modules) instead of the bundle the agent image runs. */
  readonly unbundled?: boolean
  /**
   * Seconds from SIGTERM to the kill in a term fault: the swarm's terminationGracePeriodSeconds,
   * which the agents hear of (default 30, Kubernetes' when the spec sets none).
   */
  readonly graceSeconds?: number
  readonly log: (line: string) => void
}

export interface FaultRecord {
  readonly kind: FaultKind
  readonly agent: number
  readonly at: number
  /** Frozen for (stop), or down for (kill), ms. */
  readonly downMs: number
  /** Attempt of the victim's step that was in flight. */
  readonly duringAttempt: number
  /** From the fault to the victim's next averaged step, ms (undefined: it never averaged again). */
  recoverMs?: number
  /** kill: origin the restarted agent's API reported ("peers" = loaded the swarm's state). */
  origin?: string
  /** kill/term: float32 bytes the restarted agent could not take from its peers (aim 0). */
  bytesLost?: number
  /** term: from SIGTERM to the process's exit (it finishes the round under way first). */
  leaveMs?: number
  /** kill/term: from the new process's start to the end of its first averaged step. */
  rejoinMs?: number
  /** The other agents' steps under way at the fault whose group held the victim: how they ended. */
  peersHit?: { steps: number, averagedWith: number, averagedWithout: number, failed: number, maxWallMs: number }
  /** kill: the new process logged "loaded the swarm state from a peer". */
  loadedLogLine?: boolean
  ended?: number
}

export interface AgentSummary {
  readonly index: number
  readonly name: string
  readonly role: string
  readonly incarnations: number
  readonly attempted: number
  readonly averaged: number
  readonly failed: number
  readonly transportErrors: number
  readonly maxStepMs: number
  readonly nonFinite: number
  readonly stateLoadLogLines: number
  readonly meanGroupSize: number
  readonly partsKeptLocal: number
}

export interface ChaosResult {
  readonly agents: AgentSummary[]
  readonly faults: FaultRecord[]
  /** (time since the first full set, spread) after every change of any agent's values. */
  readonly spreadSeries: Array<{ t: number, spread: number }>
  readonly spreadRises: number
  readonly stepBoundMs: number
  /** Slowest step of any agent outside its own freeze. */
  readonly maxStepMs: number
  readonly violations: string[]
  readonly wallMs: number
  readonly stateBytes: number
  /** Averaged steps of all agents per minute, from the moment every agent had averaged (faults start then) to the window's end (throughputWindowEnd). */
  readonly averagedPerMinute: number
  /** The window averagedPerMinute counts over. */
  readonly throughputWindowMs: number
  /** Times the harness stood still (the machine paused, or the harness itself): ms since the run began, and how long. */
  readonly stalls: readonly Stall[]
  /** Of the window, the time the harness stood still: averagedPerMinute over the rest is what the swarm did while it ran. */
  readonly stalledInWindowMs: number
}

/**
 * The chaos run: real agent processes built by the operator's builders, each driven by a
 * pure-averaging sidecar trainer, while faults hit random agents mid-round: SIGKILL then a new
 * process with the same env (which must load the swarm's state from a peer), or SIGSTOP then
 * SIGCONT. Returns what every agent saw and the properties that were broken.
 */
export async function runChaos (o: ChaosOptions): Promise<ChaosResult> {
  const started = Date.now()
  const watch = new StallWatch()
  watch.start()
  mkdirSync(o.outDir, { recursive: true })
  const random = seededRandom(`chaos-${o.seed}`)
  const records = new Map<string, string>()
  const dns = await startStaticDns(records)
  const ips = Array.from({ length: o.agents }, (_, i) => `127.77.${o.subnet}.${10 + i}`)
  const { agents } = await buildSidecarSwarm({
    name: 'chaos', replicas: o.agents, bootstrapReplicas: o.bootstrap, timing: o.timing, ips,
    sidecarPorts: await freePorts(o.agents), p2pPort: 31337, metricsPort: 9400, dnsServer: dns.address, membersDir: join(o.outDir, 'members'),
    logLevel: o.logLevel,
    ...(o.graceSeconds !== undefined ? { terminationGraceSeconds: o.graceSeconds } : {})
  }).then(r => { for (const [k, v] of r.dnsRecords) records.set(k, v); return r })
  const procs = agents.map(a => new AgentProcess({ name: a.name, env: a.env, logDir: o.outDir, ...(o.unbundled === true ? { main: AGENT_MAIN } : {}) }))
  const t = o.timing
  // The averager's step timeout bounds matchmaking; a formed group then has the all-reduce timeout.
  const stepTimeoutMs = (2 * t.averagingExpiration + t.allreduceTimeout) * 1000
  const stepBoundMs = stepTimeoutMs + t.allreduceTimeout * 1000
  const steps: StepRecord[] = []
  const starts: StartRecord[] = []
  const faults: FaultRecord[] = []
  const freezes: Array<{ agent: number, from: number, to: number }> = []
  const latest = new Map<number, Float32Array>()
  const spreadSeries: Array<{ t: number, spread: number }> = []
  let seriesStart = 0
  const inFlight = new Map<number, number>()
  const budgets = agents.map(() => ({ attempts: 0, rounds: o.rounds }))
  // Agents past their own rounds keep averaging until every agent completed its rounds, so a
  // victim that lost time still finds peers.
  const completed = agents.map(() => 0)
  const allDone = (): boolean => completed.every(c => c >= o.rounds)
  const controllers = new Map<number, AbortController>()
  const trainers = new Map<number, Promise<void>>()
  const violations: string[] = []
  let warmAt = started
  let endAt = started

  const note = (): void => {
    if (seriesStart === 0 && latest.size < o.agents) return
    if (seriesStart === 0) seriesStart = Date.now()
    spreadSeries.push({ t: (Date.now() - seriesStart) / 1000, spread: spread([...latest.values()]) })
  }
  const startTrainer = (i: number): void => {
    const controller = new AbortController()
    controllers.set(i, controller)
    const incarnation = procs[i].incarnation
    const run = runTrainer({
      agent: i, incarnation, baseUrl: `http://127.0.0.1:${agents[i].sidecarPort}`, elements: o.elements, seed: `${o.seed}-agent-${i}`, adoptPeerState: incarnation > 1,
      periodMs: o.periodMs, overlap: o.overlap, stepLimitMs: stepBoundMs * 3, budget: budgets[i], signal: controller.signal,
      keepGoing: () => !allDone(),
      onStart: (r) => { starts.push(r); latest.set(i, r.values); note() },
      onAttempt: (agent, attempt) => { inFlight.set(agent, attempt) },
      onStep: (r) => {
        inFlight.delete(i)
        steps.push(r)
        completed[i]++
        appendFileSync(join(o.outDir, 'steps.jsonl'), JSON.stringify({ ...r, values: undefined, peers: r.peers.map(p => p.slice(-6)) }) + '\n')
        if (!r.nonFinite && r.transportError === undefined) { latest.set(i, r.values); note() }
        for (const f of faults) {
          if (f.agent === i && f.recoverMs === undefined && f.ended !== undefined && r.averaged && r.startedAt + r.wallMs > f.ended) {
            f.recoverMs = r.startedAt + r.wallMs - f.at
            if (f.kind !== 'stop') f.rejoinMs = r.startedAt + r.wallMs - f.ended
          }
        }
      }
    }).catch((err: unknown) => { if (!controller.signal.aborted) violations.push(`${agents[i].name}'s trainer stopped: ${(err as Error).message}`) })
    trainers.set(i, run)
  }

  try {
    for (const p of procs) p.start()
    procs.forEach((_, i) => { startTrainer(i) })
    o.log(`started ${o.agents} agents (${o.bootstrap} bootstrap) on ${ips[0]}..${ips.at(-1)}; logs in ${o.outDir}`)
    const kinds: FaultKind[] = typeof o.faults === 'number'
      ? alternating(o.faults, random() < 0.5 ? 'kill' : 'stop')
      : [...o.faults]
    let nextAt = 0
    const done = allDone
    // Faults begin once every agent has averaged, and hit only agents with rounds left to recover in.
    // (at most warmupLimitMs: an agent that never averages must not stall the run, it shows in the table).
    const warmUntil = Date.now() + o.warmupLimitMs
    while (!done() && Date.now() < warmUntil && agents.some((_, i) => !steps.some(s => s.agent === i && s.averaged))) await sleep(250)
    warmAt = Date.now()
    const never = agents.filter((_, i) => !steps.some(s => s.agent === i && s.averaged))
    if (never.length > 0) o.log(`${elapsed(started)} not averaged yet, faults start anyway: ${never.map(a => a.name).join(', ')}`)
    for (const kind of kinds) {
      if (o.fixedCadence === true) {
        nextAt = nextAt === 0 ? Date.now() + o.faultGapMs : nextAt + o.faultGapMs
        await sleep(Math.max(0, nextAt - Date.now()))
      } else {
        await sleep(o.faultGapMs * (0.5 + random()))
      }
      let victim: number | undefined
      const until = Date.now() + 30_000
      const spare = (i: number): boolean => budgets[i].rounds - budgets[i].attempts >= 2
      while (victim === undefined && Date.now() < until && agents.some((_, i) => spare(i))) {
        const candidates = [...inFlight.keys()].filter(i => procs[i].running && spare(i))
        if (candidates.length > 0) victim = candidates[Math.floor(random() * candidates.length)]
        else await sleep(100)
      }
      if (victim === undefined) { o.log(`no agent left mid-round with rounds to spare: skipping the remaining ${kind} fault`); continue }
      const fault: FaultRecord = { kind, agent: victim, at: Date.now(), downMs: 0, duringAttempt: inFlight.get(victim) ?? 0 }
      faults.push(fault)
      if (kind === 'kill' || kind === 'term') {
        // A pod's containers get the signal together: the trainer stops; its agent dies (kill) or
        // finishes the round under way and leaves (term).
        controllers.get(victim)?.abort()
        if (kind === 'kill') {
          await procs[victim].killAndWait()
        } else {
          const leaving = Date.now()
          await procs[victim].stop((o.graceSeconds ?? 30) * 1000)
          fault.leaveMs = Date.now() - leaving
        }
        latest.delete(victim)
        inFlight.delete(victim)
        o.log(`${elapsed(started)} ${kind === 'kill' ? 'SIGKILL' : `SIGTERM (left after ${fault.leaveMs} ms)`} ${agents[victim].name} during its step ${fault.duringAttempt}`)
        await trainers.get(victim)
        await sleep(o.restartDelayMs)
        procs[victim].start()
        startTrainer(victim)
        ;(fault as { downMs: number }).downMs = Date.now() - fault.at
        fault.ended = Date.now()
        const firstStart = await waitFor(() => starts.find(s => s.agent === victim && s.incarnation === procs[victim!].incarnation), 120_000)
        fault.origin = firstStart?.origin ?? 'never registered'
        fault.bytesLost = fault.origin === 'peers' ? 0 : o.elements * 4
        o.log(`${elapsed(started)} restarted ${agents[victim].name}: state origin "${fault.origin}" after ${firstStart?.registerMs ?? '?'} ms`)
      } else {
        const freezeMs = Math.round(o.freezeMs * (0.7 + 0.6 * random()))
        procs[victim].signal('SIGSTOP')
        o.log(`${elapsed(started)} SIGSTOP ${agents[victim].name} during its step ${fault.duringAttempt} for ${freezeMs} ms`)
        await sleep(freezeMs)
        procs[victim].signal('SIGCONT')
        ;(fault as { downMs: number }).downMs = Date.now() - fault.at
        fault.ended = Date.now()
        freezes.push({ agent: victim, from: fault.at, to: fault.ended })
        o.log(`${elapsed(started)} SIGCONT ${agents[victim].name}`)
      }
    }
    await Promise.all([...trainers.values()])
    // Trainers restarted late may have registered meanwhile: wait for every budget's last step.
    while (!done()) { await sleep(200); await Promise.all([...trainers.values()]) }
    endAt = Date.now()
    await sleep(500)
  } finally {
    watch.stop()
    for (const c of controllers.values()) c.abort()
    await stopAgents(procs)
    dns.close()
  }

  // A frozen agent's own step includes the time it was frozen: only its peers' steps are bound.
  const frozenDuring = (s: StepRecord): boolean => freezes.some(f => f.agent === s.agent && s.startedAt < f.to && s.startedAt + s.wallMs > f.from)
  let maxStepMs = 0
  for (const s of steps) {
    if (s.nonFinite) violations.push(`${agents[s.agent].name} step ${s.attempt} returned a non-finite value`)
    if (frozenDuring(s)) continue
    maxStepMs = Math.max(maxStepMs, s.wallMs)
    // A step's own bound: matchmaking (at most the step timeout) plus the all-reduce timeout once a group formed.
    const bound = s.matchmakingMs !== undefined ? s.matchmakingMs + t.allreduceTimeout * 1000 : stepTimeoutMs
    if (s.wallMs > bound + o.slackMs) violations.push(`${agents[s.agent].name} step ${s.attempt} took ${s.wallMs} ms, above its bound of ${bound} ms (matchmaking ${s.matchmakingMs ?? '-'} ms + all-reduce timeout) by more than ${o.slackMs} ms`)
    if (s.transportError !== undefined) violations.push(`${agents[s.agent].name} step ${s.attempt} failed in transport: ${s.transportError}`)
  }
  for (const f of faults) f.peersHit = peersHit(f, steps, starts)
  for (const f of faults) {
    if (f.kind !== 'stop') {
      let log = ''
      try { log = readFileSync(procs[f.agent].logPath, 'utf8') } catch { /* no log */ }
      // The part of the log written by the process that started after this kill.
      const restartsBefore = faults.filter(g => g.kind !== 'stop' && g.agent === f.agent && g.at <= f.at).length
      const part = log.split(/^--- incarnation /m)[restartsBefore + 1] ?? ''
      f.loadedLogLine = /loaded the swarm state from a peer/.test(part)
      if (!f.loadedLogLine) violations.push(`${agents[f.agent].name}'s new process never logged "loaded the swarm state from a peer"`)
    }
    if (f.kind !== 'stop' && f.origin !== 'peers') violations.push(`${agents[f.agent].name} restarted without the swarm's state (origin "${f.origin ?? '?'}")`)
    if (f.recoverMs === undefined) violations.push(`${agents[f.agent].name} never averaged again after its ${f.kind}`)
  }
  for (const [i, a] of agents.entries()) if (!steps.some(s => s.agent === i && s.averaged)) violations.push(`${a.name} never averaged in the whole run`)
  const series = spreadSeries.map(p => p.spread)
  const up = rises(series)
  if (series.some(v => !Number.isFinite(v))) violations.push('the spread between agents became non-finite')
  if (up.length > 0) violations.push(`the spread between agents rose ${up.length} times (first at ${spreadSeries[up[0]].t.toFixed(1)} s: ${series[up[0] - 1]} -> ${series[up[0]]})`)
  const summaries = agents.map((a, i): AgentSummary => {
    const mine = steps.filter(s => s.agent === i)
    const ok = mine.filter(s => s.averaged)
    let log = ''
    try { log = readFileSync(procs[i].logPath, 'utf8') } catch { /* no log */ }
    return {
      index: i, name: a.name, role: a.role, incarnations: procs[i].incarnation, attempted: mine.length, averaged: ok.length,
      failed: mine.length - ok.length, transportErrors: mine.filter(s => s.transportError !== undefined).length,
      maxStepMs: Math.max(0, ...mine.filter(s => !frozenDuring(s)).map(s => s.wallMs)), nonFinite: mine.filter(s => s.nonFinite).length,
      stateLoadLogLines: (log.match(/loaded the swarm state from a peer/g) ?? []).length,
      partsKeptLocal: mine.reduce((n, s) => n + s.partsKeptLocal, 0),
      meanGroupSize: ok.length > 0 ? ok.reduce((n, s) => n + s.groupSize, 0) / ok.length : NaN
    }
  })
  const windowEnd = throughputWindowEnd(faults.map(f => f.at), o.faultGapMs, endAt)
  const useful = steps.filter(s => s.averaged && s.startedAt >= warmAt && s.startedAt + s.wallMs <= windowEnd).length
  const averagedPerMinute = windowEnd > warmAt ? useful / ((windowEnd - warmAt) / 60_000) : NaN
  const stalls = watch.stalls.map(s => ({ at: s.at - started, ms: s.ms }))
  return {
    agents: summaries, faults, spreadSeries, spreadRises: up.length, stepBoundMs, maxStepMs, violations, wallMs: Date.now() - started, stateBytes: o.elements * 4,
    averagedPerMinute, throughputWindowMs: windowEnd - warmAt, stalls, stalledInWindowMs: stalledWithin(watch.stalls, warmAt, windowEnd)
  }
}

/**
 * Where the throughput is counted to: one fault gap after the last fault began (the schedule's last
 * slot), or the run's end if that comes first or there were no faults. Rounds left after the
 * schedule run without faults, and counting them flattered a 30-minute run by 11 fault-free minutes.
 */
export function throughputWindowEnd (faultStarts: readonly number[], faultGapMs: number, runEnd: number): number {
  if (faultStarts.length === 0) return runEnd
  return Math.min(runEnd, Math.max(...faultStarts) + faultGapMs)
}

/**
 * How the victim's group fared: the other agents' steps under way at the fault whose group held the
 * victim (by its peer id at the time) or that failed; averaged with it (its data arrived), without
 * it (it was left out of the round), or failed.
 */
function peersHit (f: FaultRecord, steps: readonly StepRecord[], starts: readonly StartRecord[]): NonNullable<FaultRecord['peersHit']> {
  const victimId = starts.filter(s => s.agent === f.agent && s.at <= f.at).at(-1)?.peerId
  const hit = steps.filter(s => s.agent !== f.agent && s.startedAt <= f.at && s.startedAt + s.wallMs >= f.at &&
    (!s.averaged || (victimId !== undefined && s.peers.includes(victimId))))
  const without = (s: StepRecord): boolean => victimId !== undefined && s.unreachedPeers.includes(victimId)
  return {
    steps: hit.length,
    averagedWith: hit.filter(s => s.averaged && !without(s)).length,
    averagedWithout: hit.filter(s => s.averaged && without(s)).length,
    failed: hit.filter(s => !s.averaged).length,
    maxWallMs: Math.max(0, ...hit.map(s => s.wallMs))
  }
}

/** n faults, kills and freezes taking turns (a random count of each could leave one kind out). */
function alternating (n: number, first: FaultKind): FaultKind[] {
  const other: FaultKind = first === 'kill' ? 'stop' : 'kill'
  return Array.from({ length: n }, (_, k) => k % 2 === 0 ? first : other)
}

function elapsed (since: number): string { return `${((Date.now() - since) / 1000).toFixed(1).padStart(6)}s` }

async function sleep (ms: number): Promise<void> { await new Promise(resolve => setTimeout(resolve, ms)) }

async function waitFor<T> (get: () => T | undefined, limitMs: number): Promise<T | undefined> {
  const until = Date.now() + limitMs
  for (;;) {
    const v = get()
    if (v !== undefined || Date.now() > until) return v
    await sleep(100)
  }
}
