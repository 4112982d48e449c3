/**
 * The one timer of an adaptive deadline (sender-deadlines.ts, reducer-deadlines.ts): it must run the
 * check by the earliest time anyone could be late. Progress moves that time on every part or mean
 * (thousands a round), and a cleared and re-created Node timer each time was garbage that outlived
 * the young generation (a heap sampling profile kept for major GCs: `setTimeout` 5.4 of 230 MB at
 * 4 peers × 25M floats). So a timer already due sooner is kept: firing early only runs a check that
 * finds nobody late yet, which arms it again.
 */
export class DeadlineTimer {
  private timer: NodeJS.Timeout | undefined
  /** When the live timer fires; Infinity once it fired or was cancelled. */
  private dueAt = Infinity

  /** check runs one turn of the event loop after the timer, so data that arrived meanwhile is read first. */
  constructor (private readonly check: () => void, private readonly now: () => number) {}

  /** The check runs by `at` (the clock's ms) at the latest. */
  armBy (at: number): void {
    if (this.dueAt <= at) return
    clearTimeout(this.timer)
    this.dueAt = at
    this.timer = setTimeout(() => {
      // A no-op for Node's own timers; node:test's mocked ones otherwise run it again.
      this.cancel()
      setImmediate(this.check)
    }, Math.max(0, at - this.now()))
  }

  cancel (): void {
    clearTimeout(this.timer)
    this.dueAt = Infinity
  }
}
