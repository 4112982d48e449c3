/**
 * Checkpoints and completion as the operator reads them from the agents' /metrics (names from
 * api/metric-names.ts): averaging_checkpoint_round and _timestamp_seconds (the newest checkpoint
 * an agent knows durable), averaging_checkpoint_writes_total{outcome="failed"}, averaging_completed.
 *
 * Scrapes sample at most `sampleSize` Ready agents at a time, so "every agent completed" cannot
 * be read from one scrape of a large swarm. averaging_completed only goes from 0 to 1 in an agent's
 * life, so the tracker remembers, per pod (uid), which agents it has seen report 1, and prefers the
 * others when it samples: the swarm's agents are all known complete after about
 * (Ready agents / sampleSize) intervals. A pod seen reporting 0 again (its agent restarted) is
 * forgotten, and so is a pod that is no longer a Ready target.
 */
import type { Sample } from './prom-text.js'
import { sumOf } from './prom-text.js'
import { AGENT_METRICS } from '../../api/metric-names.js'

export const CHECKPOINT_ROUND_METRIC = AGENT_METRICS.checkpointRound.name
export const CHECKPOINT_TIME_METRIC = AGENT_METRICS.checkpointTimestamp.name
export const CHECKPOINT_WRITES_METRIC = AGENT_METRICS.checkpointWrites.name
export const COMPLETED_METRIC = AGENT_METRICS.completed.name
export const CHECKPOINT_SKIPPED_METRIC = AGENT_METRICS.checkpointSkipped.name

/** What one agent's scrape says about checkpoints and completion; undefined where it exports nothing. */
export interface AgentFacts { checkpointRound?: number, checkpointUnix?: number, failedWrites?: number, completed?: boolean, skipped?: number }

export function agentFacts (samples: Sample[]): AgentFacts {
  const round = sumOf(samples, CHECKPOINT_ROUND_METRIC)
  const unix = sumOf(samples, CHECKPOINT_TIME_METRIC)
  const failed = sumOf(samples, CHECKPOINT_WRITES_METRIC, { outcome: 'failed' })
  const completed = sumOf(samples, COMPLETED_METRIC)
  const skipped = sumOf(samples, CHECKPOINT_SKIPPED_METRIC)
  return {
    ...(skipped !== undefined && skipped > 0 ? { skipped: Math.round(skipped) } : {}),
    ...(round !== undefined && round > 0 ? { checkpointRound: Math.round(round) } : {}),
    ...(unix !== undefined && unix > 0 ? { checkpointUnix: unix } : {}),
    ...(failed !== undefined ? { failedWrites: failed } : {}),
    ...(completed !== undefined ? { completed: completed >= 1 } : {})
  }
}

/** The newest checkpoint any of these agents reports, with the latest time reported for that round. */
export function newestCheckpoint (facts: AgentFacts[]): { round: number, unix?: number } | undefined {
  let best: { round: number, unix?: number } | undefined
  for (const f of facts) {
    if (f.checkpointRound === undefined) continue
    if (best === undefined || f.checkpointRound > best.round) best = { round: f.checkpointRound, unix: f.checkpointUnix }
    else if (f.checkpointRound === best.round && (f.checkpointUnix ?? 0) > (best.unix ?? 0)) best.unix = f.checkpointUnix
  }
  return best
}

/** Per swarm: which pods reported completion, each pod's last failed-write count, and whether writes are failing now. */
export class FinishTracker {
  private readonly completed = new Set<string>()
  private readonly failedSeen = new Map<string, number>()
  /** Checkpoints each pod's agent skipped while restoring: counted from its start, so a pod's first scrape counts too. */
  private readonly skippedSeen = new Map<string, number>()
  private skips = 0
  /** undefined until a scrape tells: the operator restarted and has no baseline yet. */
  private failing: boolean | undefined
  private failures = 0
  private newestRound = 0
  /** Whether any agent exported averaging_completed (agents from before completion existed do not). */
  private reportsCompletion = false

  /** Pods no longer Ready targets are forgotten (a replaced pod must report again). */
  retain (ids: ReadonlySet<string>): void {
    for (const id of this.completed) if (!ids.has(id)) this.completed.delete(id)
    for (const id of this.failedSeen.keys()) if (!ids.has(id)) this.failedSeen.delete(id)
  }

  isCompleted (id: string): boolean { return this.completed.has(id) }

  /** One scrape's facts by pod id. */
  observe (facts: ReadonlyMap<string, AgentFacts>): void {
    let grew = false
    let reportsWrites = false
    for (const [id, f] of facts) {
      if (f.completed !== undefined) this.reportsCompletion = true
      if (f.skipped !== undefined && f.skipped > (this.skippedSeen.get(id) ?? 0)) {
        this.skips += f.skipped - (this.skippedSeen.get(id) ?? 0)
        this.skippedSeen.set(id, f.skipped)
      }
      if (f.completed === true) this.completed.add(id)
      else if (f.completed === false) this.completed.delete(id)
      if (f.failedWrites === undefined) continue
      reportsWrites = true
      const before = this.failedSeen.get(id)
      // The first sight of a pod is its baseline: a failure from before the operator watched is not news.
      if (before !== undefined && f.failedWrites > before) { grew = true; this.failures += f.failedWrites - before }
      this.failedSeen.set(id, f.failedWrites)
    }
    const newest = newestCheckpoint([...facts.values()])?.round ?? 0
    if (grew) this.failing = true
    else if (newest > this.newestRound) this.failing = false // a newer checkpoint became durable since
    else if (this.failing === undefined && reportsWrites) this.failing = false
    this.newestRound = Math.max(this.newestRound, newest)
  }

  /** How many of these Ready pods have reported completion; undefined while no agent exports averaging_completed. */
  completedOf (ids: readonly string[]): number | undefined { return this.reportsCompletion ? ids.filter(id => this.completed.has(id)).length : undefined }

  get checkpointFailing (): boolean | undefined { return this.failing }
  get failedWrites (): number { return this.failures }
  /** Checkpoints skipped by restoring agents since the operator started watching. */
  get skippedCheckpoints (): number { return this.skips }
}
