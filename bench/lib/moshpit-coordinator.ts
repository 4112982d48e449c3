import { createServer, type IncomingMessage, type ServerResponse, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { readJson, reply } from './coordinator.js'
import { maxDeviation, maxDifference, meanOf } from './moshpit-math.js'

/**
 * The Moshpit benchmark's rendezvous on 127.0.0.1. Its peers are *hosts*: processes that each run
 * one or more averaging peers (ranks). Requests are long-polled:
 *   POST /hello {host, ranks, addrs: {rank: multiaddr}} -> {addrs (by rank), start: {rank: {bits, vector}}} once every host said hello
 *   POST /ready {host}                                  -> {} once every host is ready (averagers created)
 *   POST /round {host, round, reports: RankReport[]}    -> {round, stop, kill} once every live host reported round `round`
 *        (round -1 before the first); `kill` lists this host's ranks to crash during the next round
 *   POST /error {host, message}                         -> a host says why it gives up
 * The coordinator knows every initial vector, so after each round it measures how far the live
 * ranks are from each other (their current mean) and from the initial means.
 */
export interface RankReport {
  readonly rank: number
  /** whether this rank's step found a group and averaged */
  readonly ok: boolean
  readonly groupSize?: number
  readonly stepMs?: number
  readonly error?: string
  /** the rank's vector after the round (averaged in place, or untouched when the step failed) */
  readonly vector: number[]
}

export interface KillRecord {
  readonly rank: number
  /** what the victim was doing when it died, as its host saw it */
  readonly when: string
}

export interface RoundRecord {
  readonly round: number
  readonly seconds: number
  readonly live: number
  readonly okSteps: number
  readonly failedSteps: number
  /** group sizes seen this round: size -> number of ranks in groups of that size */
  readonly groupSizes: Record<number, number>
  /** max |x - mean of the live ranks now| over live ranks and elements */
  readonly maxDeviation: number
  /** max |mean of the live ranks now - mean of every rank's initial vector| */
  readonly driftFromInitialMean: number
  /** max |mean of the live ranks now - mean of the live ranks' own initial vectors| */
  readonly driftFromSurvivorsInitialMean: number
  readonly errors: string[]
}

export interface MoshpitPlan {
  readonly world: number
  readonly hosts: number
  readonly vectors: readonly number[][]
  readonly bits: readonly string[]
  readonly threshold: number
  readonly maxRounds: number
  /** ranks to crash, and the round (0-based) in which they are crashed */
  readonly victims: readonly number[]
  readonly killRound: number
}

export class MoshpitCoordinator {
  readonly rounds: RoundRecord[] = []
  readonly errors = new Map<number, string>()
  readonly kills: KillRecord[] = []
  private readonly hostRanks = new Map<number, number[]>()
  private readonly addrs: string[]
  private readonly helloWaiters = new Map<number, ServerResponse>()
  private readonly readyWaiters = new Map<number, ServerResponse>()
  private readonly roundWaiters = new Map<number, ServerResponse>()
  private readonly roundReports = new Map<number, RankReport>()
  private readonly gone = new Set<number>()
  private readonly dead = new Set<number>()
  private currentRound = -1
  private roundStarted = 0
  private server: Server | undefined
  private finished = false
  private resolveDone!: () => void
  /** resolves when the run stopped (converged or out of rounds) */
  readonly done = new Promise<void>((resolve) => { this.resolveDone = resolve })

  constructor (readonly plan: MoshpitPlan, private readonly onEvent: (line: string) => void = () => {}) {
    this.addrs = Array.from({ length: plan.world }, () => '')
  }

  get converged (): boolean {
    const last = this.rounds.at(-1)
    return last != null && last.maxDeviation < this.plan.threshold
  }

  async start (): Promise<string> {
    this.server = createServer((req, res) => { this.handle(req, res).catch((err: Error) => reply(res, 400, { error: err.message })) })
    this.server.keepAliveTimeout = 600_000
    this.server.requestTimeout = 0
    this.server.headersTimeout = 0
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject)
      this.server!.listen(0, '127.0.0.1', resolve)
    })
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`
  }

  async stop (): Promise<void> {
    for (const map of [this.helloWaiters, this.readyWaiters, this.roundWaiters]) for (const res of map.values()) res.destroy()
    this.server?.closeAllConnections()
    await new Promise<void>((resolve) => this.server == null ? resolve() : this.server.close(() => resolve()))
  }

  /** The runner says a host process exited: stop waiting for it; its ranks are dead from now on. */
  hostGone (host: number, why: string): void {
    if (this.finished) return
    this.gone.add(host)
    for (const rank of this.hostRanks.get(host) ?? []) {
      if (!this.dead.has(rank)) { this.dead.add(rank); this.kills.push({ rank, when: why }) }
    }
    this.helloWaiters.delete(host)
    this.readyWaiters.delete(host)
    this.roundWaiters.delete(host)
    this.maybeFinishRound()
  }

  private liveHosts (): number[] {
    return Array.from({ length: this.plan.hosts }, (_, h) => h).filter((h) => !this.gone.has(h))
  }

  private async handle (req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJson(req)
    const host = Number(body.host)
    if (!Number.isInteger(host) || host < 0 || host >= this.plan.hosts) throw new Error(`host must be an integer in [0, ${this.plan.hosts}), got ${String(body.host)}`)
    switch (req.url) {
      case '/hello': {
        const ranks = (body.ranks as number[]).map(Number)
        this.hostRanks.set(host, ranks)
        for (const [rank, addr] of Object.entries((body.addrs ?? {}) as Record<string, string>)) this.addrs[Number(rank)] = addr
        this.helloWaiters.set(host, res)
        if (this.helloWaiters.size === this.plan.hosts) {
          this.onEvent('every host said hello')
          for (const [h, waiter] of this.helloWaiters) {
            const start = Object.fromEntries(this.hostRanks.get(h)!.map((r) => [r, { bits: this.plan.bits[r], vector: this.plan.vectors[r] }]))
            reply(waiter, 200, { addrs: this.addrs, start })
          }
          this.helloWaiters.clear()
        }
        return
      }
      case '/ready': {
        this.readyWaiters.set(host, res)
        if (this.readyWaiters.size === this.liveHosts().length) {
          this.onEvent('every host is ready')
          for (const waiter of this.readyWaiters.values()) reply(waiter, 200, {})
          this.readyWaiters.clear()
        }
        return
      }
      case '/round': {
        const round = Number(body.round)
        if (round !== this.currentRound) throw new Error(`host ${host} reported round ${round}, the current round is ${this.currentRound}`)
        for (const report of (body.reports ?? []) as RankReport[]) this.roundReports.set(report.rank, report)
        for (const kill of (body.kills ?? []) as KillRecord[]) { this.kills.push(kill); this.dead.add(kill.rank) }
        this.roundWaiters.set(host, res)
        this.maybeFinishRound()
        return
      }
      case '/error': {
        this.errors.set(host, String(body.message ?? 'unknown error'))
        reply(res, 200, {})
        return
      }
      default:
        reply(res, 404, { error: `no such endpoint ${req.url ?? ''}` })
    }
  }

  private maybeFinishRound (): void {
    const live = this.liveHosts()
    if (this.finished || this.roundWaiters.size === 0 || !live.every((h) => this.roundWaiters.has(h))) return
    let stop = false
    if (this.currentRound >= 0) {
      const record = this.evaluate(this.currentRound, (performance.now() - this.roundStarted) / 1000)
      this.rounds.push(record)
      this.onEvent(`round ${record.round + 1}: ${record.live} live, ${record.okSteps} averaged, ${record.failedSteps} failed, groups ${JSON.stringify(record.groupSizes)}, ` +
        `max deviation ${record.maxDeviation.toExponential(2)} in ${record.seconds.toFixed(2)} s`)
      stop = record.maxDeviation < this.plan.threshold || record.round + 1 >= this.plan.maxRounds || record.live === 0
    }
    this.roundReports.clear()
    const next = this.currentRound + 1
    this.currentRound = next
    this.roundStarted = performance.now()
    for (const [h, waiter] of this.roundWaiters) {
      const kill = !stop && next === this.plan.killRound ? this.plan.victims.filter((r) => this.hostRanks.get(h)?.includes(r)) : []
      reply(waiter, 200, { round: next, stop, kill })
    }
    this.roundWaiters.clear()
    if (stop) { this.finished = true; this.resolveDone() }
  }

  private evaluate (round: number, seconds: number): RoundRecord {
    const reports = [...this.roundReports.values()].filter((r) => !this.dead.has(r.rank)).sort((a, b) => a.rank - b.rank)
    const vectors = reports.map((r) => r.vector)
    const groupSizes: Record<number, number> = {}
    for (const r of reports) if (r.ok && r.groupSize != null) groupSizes[r.groupSize] = (groupSizes[r.groupSize] ?? 0) + 1
    const initialMean = meanOf(this.plan.vectors)
    const survivorsInitialMean = meanOf(reports.map((r) => this.plan.vectors[r.rank]))
    const liveMean = vectors.length > 0 ? meanOf(vectors) : initialMean
    const errors = [...new Set(reports.filter((r) => !r.ok).map((r) => r.error ?? 'unknown'))]
    return {
      round,
      seconds,
      live: reports.length,
      okSteps: reports.filter((r) => r.ok).length,
      failedSteps: reports.filter((r) => !r.ok).length,
      groupSizes,
      maxDeviation: vectors.length > 0 ? maxDeviation(vectors, liveMean) : Number.NaN,
      driftFromInitialMean: maxDifference(liveMean, initialMean),
      driftFromSurvivorsInitialMean: maxDifference(liveMean, survivorsInitialMean),
      errors
    }
  }
}
