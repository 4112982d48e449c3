import type { DecentralizedAverager } from './averager.js'

/**
 * Time the agent keeps for itself between handing its span off and the kill: the queued means and
 * the hand-off frames leave, the node stops and the process exits (0.3–1.1 s from SIGTERM to exit
 * in the chaos harness with nothing to hand off). A fifth of the grace period, 1 to 5 s.
 */
export function handOffMarginMs (graceMs: number): number {
  return Math.min(5000, Math.max(1000, graceMs / 5))
}

/**
 * Why the agent is stopping: SIGTERM (or SIGINT) at `at`, with the kill `graceMs` later (the pod's
 * terminationGracePeriodSeconds). The shutdown signal aborts with it as its reason.
 */
export class LeaveNotice extends Error {
  constructor (readonly signal: string, readonly at: number, readonly graceMs: number) {
    super(`${signal}: finishing the current round, then leaving`)
    this.name = 'LeaveNotice'
  }

  /** When a round still running hands our span off (epoch ms): the margin before the kill, or at once. */
  get handOffAt (): number {
    return this.at + Math.max(0, this.graceMs - handOffMarginMs(this.graceMs))
  }
}

/** Hands the averager's round off in time once `signal` aborts with a LeaveNotice (agent/main.ts). */
export function handOffOnNotice (signal: AbortSignal, averager: Pick<DecentralizedAverager, 'leaveBy'>): void {
  const onNotice = (): void => {
    if (signal.reason instanceof LeaveNotice) averager.leaveBy(signal.reason.handOffAt)
  }
  if (signal.aborted) onNotice()
  else signal.addEventListener('abort', onNotice, { once: true })
}
