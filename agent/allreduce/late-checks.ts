/**
 * The liveness check an adaptive deadline makes before it cuts off a late member (sender or
 * reducer). At 8 × 100 Mbit/s one TCP flow between two healthy agents stalled for seconds behind
 * the congested links (BENCHMARKS.md, "8 peers at 100 Mbit/s again"), past median + slack of the other
 * members' waits, and the member was cut off: a partial round on a healthy network. A member that
 * answers a liveness check is alive and only slow towards us: its limit runs again from its answer
 * (the fixed timeouts still bound it). The check starts `probeMs` before the limit, so a frozen
 * member, which answers nothing, is still cut off at the limit itself.
 */
type Check = { state: 'none' } | { state: 'running' } | { state: 'answered', at: number } | { state: 'silent' }

const NO_CHECK: Check = { state: 'none' }

export interface LateCheckOptions {
  /** Whether member i answers a liveness check (true also for no verdict), within probeMs. */
  readonly probe: (i: number) => Promise<boolean>
  readonly probeMs: number
}

export class LateChecks {
  private readonly checks = new Map<number, Check>()
  /** When a member that answered its check was last proven alive: its limit runs from then. */
  private readonly aliveSince = new Map<number, number>()

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

  /** When member i, waiting since `since` under `limitMs`, is next judged (Infinity while its check runs). */
  judgedAt (i: number, since: number, limitMs: number): number {
    const limit = this.limit(i, since, limitMs)
    if (this.options === undefined) return limit
    const check = this.checks.get(i) ?? NO_CHECK
    if (check.state === 'none') return limit - this.options.probeMs
    if (check.state === 'running') return Infinity
    return limit
  }

  /** Whether member i is cut off now; starts its check, or grants it a new limit, as due. */
  cutNow (i: number, since: number, limitMs: number): boolean {
    const now = this.now()
    const limit = this.limit(i, since, limitMs)
    if (this.options === undefined) return now >= limit
    const check = this.checks.get(i) ?? NO_CHECK
    if (check.state === 'none') {
      if (now >= limit - this.options.probeMs) this.start(i)
      return false
    }
    if (check.state === 'running' || now < limit) return false
    if (check.state === 'silent') return true
    this.aliveSince.set(i, check.at)
    this.checks.delete(i)
    return false
  }

  /** The limit of member i's wait: from `since`, or from its last echo if later. */
  private limit (i: number, since: number, limitMs: number): number {
    return Math.max(since, this.aliveSince.get(i) ?? since) + limitMs
  }

  private start (i: number): void {
    const check: Check = { state: 'running' }
    this.checks.set(i, check)
    const settle = (answered: boolean): void => {
      // A delivery meanwhile ended this wait (reset): its check no longer counts.
      if (this.checks.get(i) !== check) return
      this.checks.set(i, answered ? { state: 'answered', at: this.now() } : { state: 'silent' })
      this.onVerdict()
    }
    this.options!.probe(i).then(settle, () => { settle(true) })
  }
}
