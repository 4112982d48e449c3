/**
 * Averaging progress read from the agents' /metrics, on a timer apart from reconciles (a
 * reconcile never waits for an HTTP scrape). Each swarm's Ready agents are sampled (at most
 * `sampleSize`), and when the numbers change the swarm is queued so its status follows.
 *
 * Metric names from api/metric-names.ts (the agent exposes them): averaging_rounds_total{outcome="success"},
 * averaging_group_size histogram (_sum and _count), averaging_last_round_timestamp_seconds, and
 * the checkpoint and completion metrics read in checkpoint-progress.ts.
 */
import { parsePrometheusText, sumOf, type Sample } from './prom-text.js'
import type { Progress } from './status.js'
import { AGENT_METRICS } from '../../api/metric-names.js'
import { agentFacts, FinishTracker, newestCheckpoint, type AgentFacts } from './checkpoint-progress.js'
import { stableJson } from '../builders/hash.js'

export const ROUNDS_METRIC = AGENT_METRICS.rounds.name
export const GROUP_SIZE_METRIC = AGENT_METRICS.groupSize.name
export const LAST_ROUND_METRIC = AGENT_METRICS.lastRoundTimestamp.name

/** A Ready agent to scrape; `id` (the pod's uid) tells pods apart across scrapes, ip:port when absent. */
export interface ScrapeTarget { ip: string, port: number, id?: string }
const idOf = (t: ScrapeTarget): string => t.id ?? `${t.ip}:${t.port}`
export type Fetcher = (url: string, timeoutMs: number) => Promise<string>

export interface Summary {
  roundsCompleted: number
  meanGroupSize?: number
  /** Unix seconds of the latest successful round any agent reports. */
  lastRoundUnix?: number
  /** The newest checkpoint any agent reports durable (averaging_checkpoint_round > 0), and when. */
  checkpoint?: { round: number, unix?: number }
  /** Agents reporting averaging_completed 1. */
  completedAgents?: number
}

/** Combines scrapes of several agents: the most rounds any agent completed, the mean group size, the latest round, the newest checkpoint. */
export function summarize (texts: string[]): Summary | undefined {
  return summarizeSamples(texts.map(parsePrometheusText))
}

function summarizeSamples (scrapes: Sample[][], facts: AgentFacts[] = scrapes.map(agentFacts)): Summary | undefined {
  let rounds: number | undefined
  let sizeSum = 0
  let sizeCount = 0
  let last = 0
  for (const samples of scrapes) {
    const r = sumOf(samples, ROUNDS_METRIC, { outcome: 'success' })
    if (r !== undefined) rounds = Math.max(rounds ?? 0, r)
    sizeSum += sumOf(samples, `${GROUP_SIZE_METRIC}_sum`) ?? 0
    sizeCount += sumOf(samples, `${GROUP_SIZE_METRIC}_count`) ?? 0
    for (const x of samples) if (x.name === LAST_ROUND_METRIC && Number.isFinite(x.value)) last = Math.max(last, x.value)
  }
  if (rounds === undefined) return undefined
  const checkpoint = newestCheckpoint(facts)
  const completed = facts.filter(f => f.completed === true).length
  return {
    roundsCompleted: Math.round(rounds),
    ...(sizeCount > 0 ? { meanGroupSize: sizeSum / sizeCount } : {}),
    ...(last > 0 ? { lastRoundUnix: last } : {}),
    ...(checkpoint === undefined ? {} : { checkpoint }),
    ...(completed > 0 ? { completedAgents: completed } : {})
  }
}

const rfc3339 = (d: Date) => d.toISOString().replace(/\.\d+Z$/, 'Z')

export const httpFetcher: Fetcher = async (url, timeoutMs) => {
  const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) })
  if (!res.ok) throw new Error(`${url} answered HTTP ${res.status}`)
  return await res.text()
}

export class ProgressTracker {
  private readonly targets = new Map<string, ScrapeTarget[]>()
  private readonly progress = new Map<string, Progress>()
  private readonly finish = new Map<string, FinishTracker>()
  private timer: NodeJS.Timeout | undefined
  private running = false

  constructor (
    private readonly onChange: (key: string) => void,
    private readonly fetcher: Fetcher = httpFetcher,
    private readonly opts = { intervalMs: 15_000, sampleSize: 32, timeoutMs: 2_000 },
    private readonly clock: () => Date = () => new Date()
  ) {}

  /** Called by reconcile with the swarm's Ready agents; cheap, no I/O. */
  setTargets (key: string, targets: ScrapeTarget[]): void {
    if (targets.length === 0) this.targets.delete(key)
    else this.targets.set(key, targets)
    this.finish.get(key)?.retain(new Set(targets.map(idOf)))
  }

  /** The last progress read, with completion counted over the Ready agents the last setTargets named. */
  get (key: string): Progress | undefined {
    const p = this.progress.get(key)
    if (p === undefined) return undefined
    const ids = (this.targets.get(key) ?? []).map(idOf)
    const completed = ids.length === 0 ? undefined : this.finish.get(key)?.completedOf(ids)
    return { ...p, ...(completed === undefined ? {} : { completion: { completed, of: ids.length } }) }
  }

  forget (key: string): void { this.targets.delete(key); this.progress.delete(key); this.finish.delete(key) }

  start (): void {
    this.timer = setInterval(() => { void this.scrapeAll() }, this.opts.intervalMs)
    this.timer.unref()
  }

  stop (): void { if (this.timer !== undefined) clearInterval(this.timer) }

  /** One scrape of every swarm; public so tests and the first reconcile need not wait. */
  async scrapeAll (): Promise<void> {
    if (this.running) return
    this.running = true
    try {
      for (const [key, targets] of this.targets) await this.scrape(key, targets)
    } finally { this.running = false }
  }

  private async scrape (key: string, targets: ScrapeTarget[]): Promise<void> {
    // What status saw last, before this scrape changes the completion count it includes.
    const beforeView = this.get(key)
    let finish = this.finish.get(key)
    if (finish === undefined) { finish = new FinishTracker(); this.finish.set(key, finish) }
    const f = finish
    // Agents not yet seen complete first, so a large swarm's completion is known in few intervals.
    const sample = targets.length <= this.opts.sampleSize ? targets : pickPreferring(targets, this.opts.sampleSize, t => !f.isCompleted(idOf(t)))
    const settled = await Promise.allSettled(sample.map(t => this.fetcher(`http://${t.ip.includes(':') ? `[${t.ip}]` : t.ip}:${t.port}/metrics`, this.opts.timeoutMs)))
    const scraped = settled.flatMap((r, i) => r.status === 'fulfilled' ? [{ id: idOf(sample[i]), samples: parsePrometheusText(r.value) }] : [])
    const facts = scraped.map(x => agentFacts(x.samples))
    finish.observe(new Map(scraped.map((x, i) => [x.id, facts[i]])))
    const now = summarizeSamples(scraped.map(x => x.samples), facts)
    if (now === undefined) return
    const before = this.progress.get(key)
    const grew = before === undefined ? now.roundsCompleted > 0 : now.roundsCompleted > before.roundsCompleted
    const next: Progress = {
      roundsCompleted: Math.max(now.roundsCompleted, before?.roundsCompleted ?? 0),
      ...(now.meanGroupSize === undefined ? {} : { meanGroupSize: Math.round(now.meanGroupSize * 100) / 100 }),
      // The agents' own timestamp when they export it; else when the operator saw the count grow.
      ...(now.lastRoundUnix !== undefined
        ? { lastRoundTime: rfc3339(new Date(now.lastRoundUnix * 1000)) }
        : grew ? { lastRoundTime: rfc3339(this.clock()) } : before?.lastRoundTime === undefined ? {} : { lastRoundTime: before.lastRoundTime }),
      ...this.checkpointOf(now, before),
      ...(finish.checkpointFailing === undefined ? {} : { checkpointFailing: finish.checkpointFailing, checkpointFailures: finish.failedWrites }),
      ...(finish.skippedCheckpoints > 0 ? { checkpointsSkipped: finish.skippedCheckpoints } : {})
    }
    this.progress.set(key, next)
    if (stableJson(beforeView ?? null) !== stableJson(this.get(key) ?? null)) this.onChange(key)
  }

  /** The newest checkpoint seen so far (a sample without its writer does not move it back), with the agents' time or, lacking one, when it was first seen. */
  private checkpointOf (now: Summary, before: Progress | undefined): Pick<Progress, 'checkpoint'> {
    const prev = before?.checkpoint
    const cp = now.checkpoint
    if (cp === undefined || (prev !== undefined && prev.round >= cp.round)) return prev === undefined ? {} : { checkpoint: prev }
    return { checkpoint: { round: cp.round, time: rfc3339(cp.unix === undefined ? this.clock() : new Date(cp.unix * 1000)) } }
  }
}

/** A random sample, so over time every agent is seen. */
function pick<T> (xs: T[], n: number): T[] {
  const a = [...xs]
  for (let i = 0; i < Math.min(n, a.length); i++) { const j = i + Math.floor(Math.random() * (a.length - i)); [a[i], a[j]] = [a[j], a[i]] }
  return a.slice(0, n)
}

/** A random sample of n, taking those `first` accepts before the others. */
export function pickPreferring<T> (xs: T[], n: number, first: (x: T) => boolean): T[] {
  const a = pick(xs.filter(first), n)
  return a.length >= n ? a : [...a, ...pick(xs.filter(x => !first(x)), n - a.length)]
}
