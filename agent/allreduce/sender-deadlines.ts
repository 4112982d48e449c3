import { adaptiveWait, quorumReached, type AdaptiveWait } from './adaptive-deadline.js'
import { DeadlineTimer } from './deadline-timer.js'
import { LateChecks, type LateCheckOptions } from './late-checks.js'
import type { SpanReducer } from './span-reducer.js'

/** A sender the adaptive deadline cut off: it owed part `part` (relative to the span) for `waitedMs`. */
export interface CutOff {
  readonly slot: number
  readonly part: number
  readonly waitedMs: number
  readonly wait: AdaptiveWait
  /** How many delivered waits the limit came from. */
  readonly samples: number
  /** Cut off as its liveness check went unanswered (before the limit, possibly: late-checks.ts), not at the limit. */
  readonly checkUnanswered: boolean
}

export interface SenderDeadlineOptions {
  readonly reducer: SpanReducer
  /** Our own sender slot (-1 when we do not send): never waited for. */
  readonly mySlot: number
  /** Least slack over the median wait (agent/allreduce/adaptive-deadline.ts). */
  readonly floorMs: number
  /** The fixed sender timeout: the adaptive limit never exceeds it. */
  readonly capMs: number
  readonly onCutOff: (cutOff: CutOff) => void
  /** Given, a late sender is checked for liveness before it is cut off (late-checks.ts). */
  readonly checks?: LateCheckOptions
}

/**
 * The reducer's adaptive deadlines: measures how long each sender's parts took to arrive and,
 * once a quorum delivered the oldest unfinished part (the one the whole span waits on), cuts off
 * the senders still owing it after median + k·MAD of the quorum's waits (adaptive-deadline.ts).
 * Only that part matters: the reducer cannot finish later parts before it, and senders ahead of
 * it are held back by the part window, not late. The fixed timeouts keep running beside it.
 */
export class SenderDeadlines {
  /** When we began waiting for each sender's next part; undefined while we are not reading it. */
  private readonly waitingSince: Array<number | undefined>
  /** Waits (ms) measured per relative part index, for the parts still unfinished. */
  private readonly samples = new Map<number, number[]>()
  private readonly timer: DeadlineTimer
  private readonly checks: LateChecks
  private stopped = false

  constructor (private readonly options: SenderDeadlineOptions, senders: number, private readonly now: () => number = () => performance.now()) {
    const start = now()
    this.timer = new DeadlineTimer(() => { this.expire() }, now)
    this.checks = new LateChecks(options.checks, now, () => { this.expire() })
    // Every sender's first part is owed from the round's start: a sender that never connects
    // waits as long as one that connected and sent nothing.
    this.waitingSince = Array.from({ length: senders }, (_, s) => s === options.mySlot ? undefined : start)
  }

  /** We began reading sender `slot`'s part k; the first part's wait runs from the round's start. */
  reading (slot: number, k: number): void {
    if (k > 0) {
      this.waitingSince[slot] = this.now()
      this.checks.reset(slot)
    }
    this.update()
  }

  /** Sender `slot`'s part k arrived and was counted. */
  arrived (slot: number, k: number): void {
    const since = this.waitingSince[slot]
    if (since !== undefined) {
      const list = this.samples.get(k) ?? []
      list.push(this.now() - since)
      this.samples.set(k, list)
    }
    // Until we read its next part, a delay is ours (part window, means owed to it), not the sender's.
    this.waitingSince[slot] = undefined
    this.checks.reset(slot)
    this.update()
  }

  /** Re-arms the timer after any progress or ban: the quorum, the part waited on or the laggards changed. */
  update (): void {
    if (this.stopped) return
    const due = this.laggards()
    if (due === undefined || due.late.length === 0) return
    let first = Infinity
    for (const l of due.late) first = Math.min(first, this.checks.judgedAt(l.slot, l.since, due.wait.limitMs, due.wait.checkMs))
    // A sender whose liveness check runs is judged when the check ends, not by the timer.
    if (!Number.isFinite(first)) return
    // One turn of the event loop after the timer before judging (DeadlineTimer): data that arrived
    // while the process was busy is read first (timers run before I/O callbacks in Node's loop).
    this.timer.armBy(first)
  }

  stop (): void {
    this.stopped = true
    this.timer.cancel()
  }

  private expire (): void {
    if (this.stopped) return
    const due = this.laggards()
    if (due !== undefined) {
      const now = this.now()
      for (const { slot, since } of due.late) {
        const waitedMs = now - since
        const cut = this.checks.cutNow(slot, since, due.wait.limitMs, due.wait.checkMs)
        if (cut !== false) this.options.onCutOff({ slot, part: due.part, waitedMs, wait: due.wait, samples: due.samples, checkUnanswered: cut === 'unanswered' })
      }
    }
    this.update()
  }

  /** The part the span waits on, its adaptive limit, and who still owes it while we read them; undefined before a quorum. */
  private laggards (): { part: number, wait: AdaptiveWait, samples: number, late: Array<{ slot: number, since: number }> } | undefined {
    const { reducer, mySlot, floorMs, capMs } = this.options
    if (reducer.done) return undefined
    const part = reducer.completedParts
    for (const k of this.samples.keys()) if (k < part) this.samples.delete(k)
    let expected = 0
    let delivered = 0
    const late: Array<{ slot: number, since: number }> = []
    for (let slot = 0; slot < this.waitingSince.length; slot++) {
      if (reducer.isBanned(slot)) continue
      expected++
      if (reducer.nextPartOf(slot) > part) { delivered++; continue }
      const since = this.waitingSince[slot]
      if (slot !== mySlot && since !== undefined) late.push({ slot, since })
    }
    if (!quorumReached(delivered, expected)) return undefined
    const samples = this.samples.get(part) ?? []
    const wait = adaptiveWait(samples, floorMs, capMs)
    return wait === undefined ? undefined : { part, wait, samples: samples.length, late }
  }
}
