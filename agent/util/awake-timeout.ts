/**
 * A timeout for verdicts of silence, counted in time our own event loop was awake.
 *
 * A liveness check concludes "no answer within the request timeout". When our process stalls (a
 * long GC, a CPU-starved pod, one test process running a whole swarm), the timer fires late, and
 * it fires before the I/O that came in during the stall is read (node runs timers before polling):
 * an answer already sitting in our socket is judged missing. Under two CPU burners a follower so
 * marked a live leader silent for the rest of its declaration, and a key of three split in two.
 * Here a timer that fires late by more than its tolerance waits again for as long as it was late,
 * so silence is only concluded over a window in which we could have read the answer. A process
 * that stays that late is still given a verdict: at most MAX_STRETCH times the timeout.
 */
export interface AwakeTimeout {
  readonly signal: AbortSignal
  /** Stops the timer (the check is over); the signal never aborts afterwards. */
  clear: () => void
}

/** How many times the timeout a stalled process may stretch it to. */
export const MAX_STRETCH = 4

/** Lateness a timer is allowed before it counts as a stall of ours: ms/10, at least 25 ms. */
export function lateTolerance (ms: number): number {
  return Math.max(25, ms / 10)
}

/**
 * The next wait (ms) once the timer set at `setAt` for `waitMs` fired at `now`, having started at
 * `started` with timeout `ms`: 0 to abort now, else how much longer to wait (as late as it fired).
 */
export function nextWait (ms: number, started: number, setAt: number, waitMs: number, now: number): number {
  const late = now - (setAt + waitMs)
  if (late <= lateTolerance(ms)) return 0
  const left = started + MAX_STRETCH * ms - now
  return left <= 0 ? 0 : Math.min(late, left)
}

export function awakeTimeout (ms: number, now: () => number = () => performance.now()): AwakeTimeout {
  const controller = new AbortController()
  const started = now()
  let timer: ReturnType<typeof setTimeout> | undefined
  const arm = (waitMs: number): void => {
    const setAt = now()
    timer = setTimeout(() => {
      const again = nextWait(ms, started, setAt, waitMs, now())
      if (again > 0) arm(again)
      else controller.abort(new DOMException(`no answer within ${ms} ms of our own time awake`, 'TimeoutError'))
    }, waitMs)
    // As AbortSignal.timeout's: it does not hold the process open.
    timer.unref()
  }
  arm(ms)
  return { signal: controller.signal, clear: () => { clearTimeout(timer) } }
}
