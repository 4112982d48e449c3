/**
 * The liveness check an adaptive deadline makes before it cuts off a late member (sender or
 * reducer). At 8 × 100 Mbit/s one TCP flow between two healthy agents stalled for seconds behind
 * the congested links (BENCHMARKS.md, "8 peers at 100 Mbit/s again"), past median + slack of the other
 * members' waits, and the member was cut off: a partial round on a healthy network. A member that
 * answers a liveness check is alive and only slow towards us: its limit runs again from its answer
 * (the fixed timeouts still bound it).
 *
 * When: a member's first check of the round starts once it is late by the statistics alone
 * (`checkMs`: median + max(k·σ̂, median), no floor), and at the latest `probeMs` before the limit;
 * later checks `probeMs` before each limit. A member silent through a check is cut off as the check ends;
 * one whose check gives no verdict (a client-mode agent serves none) at its limit.
 * The floor (two request timeouts) is there for members that are alive and slow; one that does not
 * answer a one-byte liveness check within a request timeout is not (SIGSTOP, a dead host behind an open
 * connection). With the check only `probeMs` before the floor's limit, a frozen member of a round of
 * small tensors held its group the whole floor: the chaos harness's freezes, ~2.05 s per round where
 * the round took 40 ms, three members each, about 1 % of the swarm's time at one freeze per 30 s.
 */
type Check = { state: 'none' } | { state: 'running' } | { state: 'answered', at: number } | { state: 'silent' } | { state: 'unproven' }

const NO_CHECK: Check = { state: 'none' }

export interface LateCheckOptions {
  /**
   * Whether member i answers a liveness check within probeMs: true, false (silent: gone), or
   * 'unknown' (no verdict, as from a client-mode agent, which serves no check: cut off at its limit
   * as without checks).
   */
  readonly probe: (i: number) => Promise<boolean | 'unknown'>
  readonly probeMs: number
}

export class LateChecks {
  private readonly checks = new Map<number, Check>()
  /** When a member that answered its check was last proven alive: its limit runs from then. */
  private readonly aliveSince = new Map<number, number>()
  /** Members checked at all this round (see checkAt). */
  private readonly checked = new Set<number>()

  /** onVerdict: a check ended; the deadline judges again. */
  constructor (
    private readonly options: LateCheckOptions | undefined,
    private readonly now: () => number,
    private readonly onVerdict: () => void
  ) {}

  /** Member i's wait ended (it delivered) or a new one began: earlier checks no longer count. */
  reset (i: number): void {
    this.checks.delete(i)
    this.aliveSince.delete(i)
  }

  /**
   * When member i, waiting since `since` under `limitMs` (first checked `checkMs` into its wait,
   * if sooner than `probeMs` before the limit), is next judged (Infinity while its check runs).
   */
  judgedAt (i: number, since: number, limitMs: number, checkMs = limitMs): number {
    const limit = this.limit(i, since, limitMs)
    if (this.options === undefined) return limit
    const check = this.checks.get(i) ?? NO_CHECK
    if (check.state === 'none') return this.checkAt(i, since, limit, checkMs)
    if (check.state === 'running') return Infinity
    if (check.state === 'silent') return this.now()
    return limit
  }

  /**
   * Whether member i is cut off now: 'limit' at its limit without checks, 'unanswered' when silent
   * through its check; false otherwise, having started its check or granted it a new limit, as due.
   */
  cutNow (i: number, since: number, limitMs: number, checkMs = limitMs): false | 'limit' | 'unanswered' {
    const now = this.now()
    const limit = this.limit(i, since, limitMs)
    if (this.options === undefined) return now >= limit ? 'limit' : false
    const check = this.checks.get(i) ?? NO_CHECK
    if (check.state === 'none') {
      if (now >= this.checkAt(i, since, limit, checkMs)) this.start(i)
      return false
    }
    if (check.state === 'silent') return 'unanswered'
    if (check.state === 'running' || now < limit) return false
    if (check.state === 'unproven') return 'limit'
    this.aliveSince.set(i, check.at)
    this.checks.delete(i)
    return false
  }

  /**
   * When member i's next check starts: probeMs before the limit, or sooner once it is late by the
   * statistics if it has not been checked yet this round (a member slow on every part answers once,
   * not one check a part).
   */
  private checkAt (i: number, since: number, limit: number, checkMs: number): number {
    const beforeLimit = limit - this.options!.probeMs
    return this.checked.has(i) ? beforeLimit : Math.min(beforeLimit, since + checkMs)
  }

  /** The limit of member i's wait: from `since`, or from its last answer if later. */
  private limit (i: number, since: number, limitMs: number): number {
    return Math.max(since, this.aliveSince.get(i) ?? since) + limitMs
  }

  private start (i: number): void {
    const check: Check = { state: 'running' }
    this.checks.set(i, check)
    this.checked.add(i)
    const settle = (answered: boolean | 'unknown'): void => {
      // A delivery meanwhile ended this wait (reset): its check no longer counts.
      if (this.checks.get(i) !== check) return
      this.checks.set(i, answered === 'unknown' ? { state: 'unproven' } : answered ? { state: 'answered', at: this.now() } : { state: 'silent' })
      this.onVerdict()
    }
    this.options!.probe(i).then(settle, () => { settle(true) })
  }
}
