import { adaptiveWait, quorumReached, type AdaptiveWait } from './adaptive-deadline.js'
import { DeadlineTimer } from './deadline-timer.js'
import { LateChecks, type LateCheckOptions } from './late-checks.js'

/** A reducer the adaptive deadline cut off: it owed us the mean of part `part` (relative to its span) for `waitedMs`. */
export interface ReducerCutOff {
  /** The reducer's index in the group. */
  readonly reducer: number
  readonly part: number
  readonly waitedMs: number
  readonly wait: AdaptiveWait
  /** How many delivered waits the limit came from. */
  readonly samples: number
  /** Cut off without a second slack: we had cut it off as a sender for silence (ReducerDeadlines.silent). */
  readonly silentSender: boolean
  /** Cut off for not accepting our stream while most reducers had (ReducerDeadlines.accepted): `wait` is over acceptance times. */
  readonly unaccepted: boolean
  /** Cut off at once, no majority waited for: as a sender it had not answered a liveness check (ReducerDeadlines.silent); `wait` and `samples` say nothing then. */
  readonly unanswered: boolean
  /** Cut off as its own liveness check, late as a reducer, went unanswered (before the limit, possibly: late-checks.ts). */
  readonly checkUnanswered: boolean
}

export interface ReducerDeadlineOptions {
  /** Parts in each member's span, by group index (0: it reduces nothing and is never waited for). */
  readonly spanParts: readonly number[]
  /** Our own group index: our span's means count as delivered like anyone's; we are never cut off. */
  readonly me: number
  /** Least slack over the median wait (agent/allreduce/adaptive-deadline.ts). */
  readonly floorMs: number
  /** The fixed reducer timeout: the adaptive limit never exceeds it. */
  readonly capMs: number
  readonly onCutOff: (cutOff: ReducerCutOff) => void
  /** Given, a reducer late with its means is checked for liveness before it is cut off (late-checks.ts). */
  readonly checks?: LateCheckOptions
}

/**
 * The sender's adaptive deadlines, the mirror of the reducer's (sender-deadlines.ts): measures how
 * long each reducer took to send back the means of its span and, once a majority of the reducers
 * (our own span among them) returned the mean of the oldest part still owed, cuts off those still
 * owing it after median + k·MAD of the majority's waits. A member stopped with SIGSTOP right after
 * its group formed keeps its connections open and answers nothing: the others cut it off as a
 * sender within the adaptive deadline, then waited for it as a reducer until the fixed reducer
 * timeout (10 s of a 12 s round in the chaos run). A reducer that is late because one of ITS
 * senders is late is not cut off: every reducer waits for that sender, so the median moves with it.
 *
 * A wait runs from the round's start for a span's first mean, from the previous mean otherwise.
 *
 * Acceptance is judged apart: a live reducer accepts our stream as soon as it reads our header,
 * whatever its other senders do, so once a majority of the reducers (our own span at 0) accepted,
 * one that has not within median + slack of their acceptance times is cut off, unless it answers
 * the liveness check as a late mean's reducer must (late-checks.ts): a header or its reply can
 * stall behind a congested link too (one socket for both roles of a pair put the reply behind
 * megabytes of parts, and healthy reducers were cut off: BENCHMARKS.md). A member that
 * reduces no span never sees a frozen member as a sender (silent() is never called), and its means'
 * waits were inflated by that sender: it had given the frozen member a second slack (~4 s where
 * the others took ~2 s), finished its round later than its group, and then came late to the span
 * repair they ran (agent/allreduce/repair.ts).
 */
export class ReducerDeadlines {
  private readonly received: number[]
  private readonly waitingSince: number[]
  /** Reducers we stopped waiting for (failed, or cut off). */
  private readonly gone: boolean[]
  /** Members we cut off as senders for silence: as reducers they get no second slack (silent()). */
  private readonly silentSenders: boolean[]
  /** Of those, the ones that did not answer a liveness check either: as reducers they are not waited for at all (silent()). */
  private readonly unansweredSenders: boolean[]
  /** When each reducer accepted our stream (ms after the round's start; ours at 0), undefined while it has not. */
  private readonly acceptedAt: Array<number | undefined>
  private readonly start: number
  /** Waits (ms) measured per relative part index. */
  private readonly samples = new Map<number, number[]>()
  private readonly timer: DeadlineTimer
  private readonly checks: LateChecks
  private stopped = false

  constructor (private readonly options: ReducerDeadlineOptions, private readonly now: () => number = () => performance.now()) {
    const start = now()
    this.timer = new DeadlineTimer(() => { this.expire() }, now)
    this.checks = new LateChecks(options.checks, now, () => { this.expire() })
    this.start = start
    this.acceptedAt = options.spanParts.map((_, r) => r === options.me ? 0 : undefined)
    this.received = options.spanParts.map(() => 0)
    this.waitingSince = options.spanParts.map(() => start)
    this.gone = options.spanParts.map(n => n === 0)
    this.silentSenders = options.spanParts.map(() => false)
    this.unansweredSenders = options.spanParts.map(() => false)
  }

  /**
   * Member r was cut off as a sender for silence (a deadline passed with no part of it): the means
   * it owes us as a reducer come over the same link from the same process, and the rest of the group
   * already waited for it once. Its wait for the mean it owes is not judged a second time against
   * median + slack of the other reducers' waits, which that first wait inflated (they all waited for
   * its part before they could answer): it is cut off as soon as a majority of the reducers returned
   * that mean. A member stopped with SIGSTOP just before its round had held the others ~2 slacks
   * (cut off as a sender at median + slack, then as a reducer at twice the new median).
   *
   * `unanswered`: it did not answer a liveness check either (or sent nothing for the whole fixed sender
   * timeout). That is proof it is gone, not a statistic: as a reducer it is cut off now, majority or
   * not. A round's reducers are often two (a small tensor's few parts, or bandwidth-sized spans), and
   * one of two is never a majority: in the chaos harness's freezes a frozen reducer held members that
   * had already found it silent as a sender to the fixed reducer timeout (5.4 s against 2.0 s).
   */
  silent (r: number, unanswered = false): void {
    if (this.silentSenders[r] && (this.unansweredSenders[r] || !unanswered)) return
    this.silentSenders[r] = true
    this.unansweredSenders[r] ||= unanswered
    this.update()
  }

  /** Reducer r accepted our stream. */
  accepted (r: number): void {
    if (this.acceptedAt[r] !== undefined) return
    this.acceptedAt[r] = this.now() - this.start
    this.update()
  }

  /** Reducer r's next mean arrived (for our own span: its next part is done). */
  delivered (r: number): void {
    const k = this.received[r]
    const list = this.samples.get(k) ?? []
    list.push(this.now() - this.waitingSince[r])
    this.samples.set(k, list)
    this.received[r] = k + 1
    this.waitingSince[r] = this.now()
    this.checks.reset(r)
    this.update()
  }

  /** We stopped waiting for reducer r (its channel failed, or it was cut off). */
  failed (r: number): void {
    this.gone[r] = true
    this.update()
  }

  stop (): void {
    this.stopped = true
    this.timer.cancel()
  }

  private update (): void {
    if (this.stopped) return
    const due = this.laggards()
    const unaccepted = this.unaccepted()
    const times = [
      ...this.unansweredOwing().map(() => this.now()),
      ...(due?.late ?? []).map(r => this.silentSenders[r] ? this.now() : this.checks.judgedAt(r, this.waitingSince[r], due!.wait.limitMs, due!.wait.checkMs)),
      ...(unaccepted?.late ?? []).map(r => this.checks.judgedAt(r, this.start, unaccepted!.wait.limitMs, unaccepted!.wait.checkMs))
    ]
    // A reducer whose liveness check runs is judged when the check ends, not by the timer.
    const next = Math.min(...times)
    if (!Number.isFinite(next)) return
    // One turn of the event loop after the timer (DeadlineTimer), as the reducer's deadlines do:
    // means that arrived while the process was busy are read before anyone is judged late.
    this.timer.armBy(next)
  }

  private expire (): void {
    if (this.stopped) return
    for (const r of this.unansweredOwing()) {
      this.gone[r] = true
      const wait = { limitMs: 0, checkMs: 0, medianMs: 0, madMs: 0 }
      this.options.onCutOff({ reducer: r, part: this.received[r], waitedMs: this.now() - this.waitingSince[r], wait, samples: 0, silentSender: true, unaccepted: this.acceptedAt[r] === undefined, unanswered: true, checkUnanswered: false })
    }
    const unaccepted = this.unaccepted()
    if (unaccepted !== undefined) {
      const waitedMs = this.now() - this.start
      for (const r of unaccepted.late) {
        const cut = this.checks.cutNow(r, this.start, unaccepted.wait.limitMs, unaccepted.wait.checkMs)
        if (cut === false) continue
        this.gone[r] = true
        this.options.onCutOff({ reducer: r, part: this.received[r], waitedMs, wait: unaccepted.wait, samples: unaccepted.samples, silentSender: false, unaccepted: true, unanswered: false, checkUnanswered: cut === 'unanswered' })
      }
    }
    const due = this.laggards()
    if (due !== undefined) {
      const now = this.now()
      for (const r of due.late) {
        const waitedMs = now - this.waitingSince[r]
        const cut = this.silentSenders[r] || this.checks.cutNow(r, this.waitingSince[r], due.wait.limitMs, due.wait.checkMs)
        if (cut !== false) {
          this.gone[r] = true
          this.options.onCutOff({ reducer: r, part: due.part, waitedMs, wait: due.wait, samples: due.samples, silentSender: this.silentSenders[r], unaccepted: false, unanswered: false, checkUnanswered: cut === 'unanswered' })
        }
      }
    }
    this.update()
  }

  /** Reducers still owing us acceptance or a mean that, as senders, did not answer a liveness check (silent()). */
  private unansweredOwing (): number[] {
    const owing: number[] = []
    for (let r = 0; r < this.gone.length; r++) {
      if (!this.unansweredSenders[r] || this.gone[r] || r === this.options.me) continue
      if (this.acceptedAt[r] === undefined || this.received[r] < this.options.spanParts[r]) owing.push(r)
    }
    return owing
  }

  /** The reducers still expected that have not accepted our stream, and the limit from the acceptance times of the others; undefined before a majority accepted. */
  private unaccepted (): { wait: AdaptiveWait, samples: number, late: number[] } | undefined {
    // Asked on every mean: nothing allocated once every reducer accepted (or is gone).
    let anyLate = false
    for (let r = 0; r < this.acceptedAt.length && !anyLate; r++) anyLate = this.options.spanParts[r] > 0 && this.acceptedAt[r] === undefined && !this.gone[r]
    if (!anyLate) return undefined
    const expected = this.options.spanParts.flatMap((n, r) => n > 0 && !(this.gone[r] && this.acceptedAt[r] === undefined) ? [r] : [])
    const times = expected.flatMap(r => this.acceptedAt[r] !== undefined ? [this.acceptedAt[r]!] : [])
    const late = expected.filter(r => this.acceptedAt[r] === undefined && !this.gone[r])
    if (late.length === 0 || !(quorumReached(times.length, expected.length) || this.pairJudged(times.length, expected.length))) return undefined
    const wait = adaptiveWait(times, this.options.floorMs, this.options.capMs)
    return wait === undefined ? undefined : { wait, samples: times.length, late }
  }

  /**
   * Two reducers, one accepted: never a majority, yet acceptance says nothing of load (a live reducer
   * accepts as soon as it reads our header), so with liveness checks the other is judged on the one
   * time: past the floor it is checked, and cut off only if it does not answer. A member that reduces
   * no span, sending to two reducers one of which froze, waited the fixed reducer timeout for it.
   */
  private pairJudged (accepted: number, expected: number): boolean {
    return this.options.checks !== undefined && expected === 2 && accepted === 1
  }

  /** The oldest mean still owed, its adaptive limit and the reducers owing it; undefined before a quorum. */
  private laggards (): { part: number, wait: AdaptiveWait, samples: number, late: number[] } | undefined {
    const { spanParts, me, floorMs, capMs } = this.options
    let part = Infinity
    for (let r = 0; r < spanParts.length; r++) {
      if (!this.gone[r] && this.received[r] < spanParts[r]) part = Math.min(part, this.received[r])
    }
    if (part === Infinity) return undefined
    for (const k of this.samples.keys()) if (k < part) this.samples.delete(k)
    let expected = 0
    let delivered = 0
    const late: number[] = []
    for (let r = 0; r < spanParts.length; r++) {
      if (spanParts[r] <= part || (this.gone[r] && this.received[r] <= part)) continue
      expected++
      if (this.received[r] > part) delivered++
      else if (r !== me) late.push(r)
    }
    if (!quorumReached(delivered, expected)) return undefined
    const samples = this.samples.get(part) ?? []
    const wait = adaptiveWait(samples, floorMs, capMs)
    return wait === undefined ? undefined : { part, wait, samples: samples.length, late }
  }
}
