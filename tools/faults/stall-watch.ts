/**
 * Times when the harness itself stood still. A fault-free chaos run lost 15.6 s of every agent's steps at
 * once (fifty-fifth session): the whole VM had been paused for a snapshot (the kernel logged "crng reseeded
 * due to virtual machine fork"), and the run's throughput, the baseline of a churn figure, fell by 5 %
 * with nothing of ours at fault. The harness's event loop is late by as long as the machine (or the
 * harness, hosting every trainer) stood still, so a tick that comes a second or more late marks such a
 * stall, and the report says so, with the throughput the window's other time gives.
 */

/** One stall: when the last tick before it came, and how long the next one came late (ms). */
export interface Stall { readonly at: number, readonly ms: number }

/** A tick this much later than its interval is a stall: ordinary timer lateness under load is tens of ms. */
export const STALL_MS = 1000
const TICK_MS = 100

export class StallWatch {
  private last: number | undefined
  private timer: NodeJS.Timeout | undefined
  private readonly found: Stall[] = []

  constructor (private readonly now: () => number = Date.now) {}

  start (): void {
    this.last = this.now()
    this.timer = setInterval(() => { this.observe(this.now()) }, TICK_MS)
    this.timer.unref()
  }

  stop (): void {
    clearInterval(this.timer)
    this.timer = undefined
  }

  /** A tick at `now` (wall-clock ms): records a stall when it came STALL_MS or more after it was due. */
  observe (now: number): void {
    if (this.last !== undefined && now - this.last - TICK_MS >= STALL_MS) this.found.push({ at: this.last, ms: now - this.last - TICK_MS })
    this.last = now
  }

  get stalls (): readonly Stall[] { return this.found }
}

/** Milliseconds of `stalls` that fall within [from, to). */
export function stalledWithin (stalls: readonly Stall[], from: number, to: number): number {
  let sum = 0
  for (const s of stalls) sum += Math.max(0, Math.min(to, s.at + s.ms) - Math.max(from, s.at))
  return sum
}
