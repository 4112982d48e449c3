import { adaptiveWait } from '../allreduce/adaptive-deadline.js'

/**
 * How long after a leader declares its followers arrive, and when waiting for more stops paying.
 * A leader waits for followers until its declaration expires (hivemind's averaging_expiration,
 * 15 s by default); when a member of its key was killed or frozen, the rest wait out the whole
 * declaration for nobody. Every peer keeps the delays at which followers joined, from their
 * leader's declaration: as a leader those that joined it, as a follower those its leader lists in
 * its BEGIN_ALLREDUCE (so a peer that rarely leads learns them too: with groups of 4 and only a
 * leader's own record, a leader met its eighth arrival in round 3 at the earliest, usually later,
 * and a 64-peer swarm losing a peer a round waited out every 15 s declaration for it). Late askers
 * a leader turned away count too (so cutting early does not hide the late arrivals that would
 * move the estimate). With a quorum in, and everybody it sees looking under its key joined, a
 * leader assembles once the limit the all-reduce's adaptive deadline uses
 * (median + max(k·σ̂, median, floor), agent/allreduce/adaptive-deadline.ts) has passed.
 */

/** Arrivals kept: recent enough to follow a changed swarm, enough for a stable median. */
export const ARRIVALS_KEPT = 64
/**
 * Fewer arrivals than this: no estimate, the leader waits for its expiration as before. Four is
 * one group of four's arrivals (three, shared) and one of the current declaration's: round 2 of a
 * swarm can cut short; the slack of at least the median and a request timeout over the median
 * keeps a small sample from cutting off a follower that is merely a little behind.
 */
export const MIN_ARRIVALS = 4

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
