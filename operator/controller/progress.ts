/**
 * Averaging progress read from the agents' /metrics, on a timer apart from reconciles (a
 * reconcile never waits for an HTTP scrape). Each swarm's Ready agents are sampled (at most
 * `sampleSize`), and when the numbers change the swarm is queued so its status follows.
 *
 * Metric names from api/metric-names.ts (the agent exposes them): averaging_rounds_total{outcome="success"},
 * averaging_group_size histogram (_sum and _count), averaging_last_round_timestamp_seconds.
 */
import { parsePrometheusText, sumOf } from './prom-text.js'
import type { Progress } from './status.js'
import { AGENT_METRICS } from '../../api/metric-names.js'

export const ROUNDS_METRIC = AGENT_METRICS.rounds.name
export const GROUP_SIZE_METRIC = AGENT_METRICS.groupSize.name
export const LAST_ROUND_METRIC = AGENT_METRICS.lastRoundTimestamp.name

export interface ScrapeTarget { ip: string, port: number }
export type Fetcher = (url: string, timeoutMs: number) => Promise<string>

export interface Summary { roundsCompleted: number, meanGroupSize?: number, /** Unix seconds of the latest successful round any agent reports. */ lastRoundUnix?: number }

/** Combines scrapes of several agents: the most rounds any agent completed, the mean group size, the latest round. */
export function summarize (texts: string[]): Summary | undefined {
  let rounds: number | undefined
  let sizeSum = 0
  let sizeCount = 0
  let last = 0
  for (const t of texts) {
    const samples = parsePrometheusText(t)
    const r = sumOf(samples, ROUNDS_METRIC, { outcome: 'success' })
    if (r !== undefined) rounds = Math.max(rounds ?? 0, r)
    sizeSum += sumOf(samples, `${GROUP_SIZE_METRIC}_sum`) ?? 0
    sizeCount += sumOf(samples, `${GROUP_SIZE_METRIC}_count`) ?? 0
    for (const x of samples) if (x.name === LAST_ROUND_METRIC && Number.isFinite(x.value)) last = Math.max(last, x.value)
  }
  if (rounds === undefined) return undefined
  return { roundsCompleted: Math.round(rounds), ...(sizeCount > 0 ? { meanGroupSize: sizeSum / sizeCount } : {}), ...(last > 0 ? { lastRoundUnix: last } : {}) }
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
  }

  get (key: string): Progress | undefined { return this.progress.get(key) }

  forget (key: string): void { this.targets.delete(key); this.progress.delete(key) }

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
    const sample = targets.length <= this.opts.sampleSize ? targets : pick(targets, this.opts.sampleSize)
    const texts = (await Promise.allSettled(sample.map(t => this.fetcher(`http://${t.ip.includes(':') ? `[${t.ip}]` : t.ip}:${t.port}/metrics`, this.opts.timeoutMs))))
      .flatMap(r => r.status === 'fulfilled' ? [r.value] : [])
    const now = summarize(texts)
    if (now === undefined) return
    const before = this.progress.get(key)
    const grew = before === undefined ? now.roundsCompleted > 0 : now.roundsCompleted > before.roundsCompleted
    const next: Progress = {
      roundsCompleted: Math.max(now.roundsCompleted, before?.roundsCompleted ?? 0),
      ...(now.meanGroupSize === undefined ? {} : { meanGroupSize: Math.round(now.meanGroupSize * 100) / 100 }),
      // The agents' own timestamp when they export it; else when the operator saw the count grow.
      ...(now.lastRoundUnix !== undefined
        ? { lastRoundTime: rfc3339(new Date(now.lastRoundUnix * 1000)) }
        : grew ? { lastRoundTime: rfc3339(this.clock()) } : before?.lastRoundTime === undefined ? {} : { lastRoundTime: before.lastRoundTime })
    }
    this.progress.set(key, next)
    if (before === undefined || before.roundsCompleted !== next.roundsCompleted || before.meanGroupSize !== next.meanGroupSize || before.lastRoundTime !== next.lastRoundTime) this.onChange(key)
  }
}

/** A random sample, so over time every agent is seen. */
function pick<T> (xs: T[], n: number): T[] {
  const a = [...xs]
  for (let i = 0; i < n; i++) { const j = i + Math.floor(Math.random() * (a.length - i)); [a[i], a[j]] = [a[j], a[i]] }
  return a.slice(0, n)
}
