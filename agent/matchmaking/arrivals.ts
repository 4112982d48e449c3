import { adaptiveWait } from '../allreduce/adaptive-deadline.js'

/**
 * How long after a leader declares its followers arrive, and when waiting for more stops paying.
 * A leader waits for followers until its declaration expires (hivemind's averaging_expiration,
 * 15 s by default); when a member of its key was killed or frozen, the rest wait out the whole
 * declaration for nobody. The leader keeps the delays at which followers joined it, from its
 * declaration, and late askers it turned away count too (so cutting early does not hide the late
 * arrivals that would move the estimate). With a quorum in, and everybody it sees looking under
 * its key joined, it assembles once the limit the all-reduce's adaptive deadline uses
 * (median + max(k·σ̂, median, floor), agent/allreduce/adaptive-deadline.ts) has passed.
 */

/** Arrivals kept: recent enough to follow a changed swarm, enough for a stable median. */
export const ARRIVALS_KEPT = 64
/** Fewer arrivals than this: no estimate, the leader waits for its expiration as before. */
export const MIN_ARRIVALS = 8

export class ArrivalClock {
  private readonly delays: number[] = []

  /** A follower joined (or asked too late to) `seconds` after the leader declared. */
  record (seconds: number): void {
    if (!(seconds >= 0) || !Number.isFinite(seconds)) return
    this.delays.push(seconds * 1000)
    if (this.delays.length > ARRIVALS_KEPT) this.delays.shift()
  }

  get count (): number { return this.delays.length }

  /**
   * Seconds after a declaration by which its followers have come: at least floorSeconds over the
   * median, at most capSeconds (the declaration itself); undefined without MIN_ARRIVALS arrivals.
   */
  cutoff (floorSeconds: number, capSeconds: number): number | undefined {
    if (this.delays.length < MIN_ARRIVALS) return undefined
    const wait = adaptiveWait(this.delays, floorSeconds * 1000, capSeconds * 1000)
    return wait === undefined ? undefined : wait.limitMs / 1000
  }
}
