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
 * Event loop utilization (the share of a timer's wait our loop spent running callbacks, not waiting
 * for I/O) above which a timer that fired on time still waits, with AwakeTimeoutOptions.whileBusy.
 */
export const BUSY_UTILIZATION = 0.9

export interface AwakeTimeoutOptions {
  /**
   * Also wait again, a late tolerance at a time, while our loop was busy for nearly all of the last
   * wait (BUSY_UTILIZATION), within the same MAX_STRETCH. After a stall the loop works off the I/O
   * that came meanwhile, and every hop of an exchange waits behind that backlog while the timer
   * fires on time: eight agents in one process under two CPU burners stalled ~0.6 s, the timer waited
   * again as long as it was late, and two followers judged their live leader silent while its echo
   * was still queued (lopsided-views, a key of five ending as a three and a lone peer). A loop that
   * idled (epoll found nothing to read) has read whatever came: silence then is the peer's.
   */
  readonly whileBusy?: boolean
}

/**
 * The next wait (ms) once the timer set at `setAt` for `waitMs` fired at `now`, having started at
 * `started` with timeout `ms`: 0 to abort now, else how much longer to wait (as late as it fired; a
 * late tolerance if it fired on time while our loop was `busy`).
 */
export function nextWait (ms: number, started: number, setAt: number, waitMs: number, now: number, busy = false): number {
  const late = now - (setAt + waitMs)
  const left = started + MAX_STRETCH * ms - now
  if (left <= 0) return 0
  if (late > lateTolerance(ms)) return Math.min(late, left)
  return busy ? Math.min(lateTolerance(ms), left) : 0
}

export function awakeTimeout (ms: number, now: () => number = () => performance.now(), options: AwakeTimeoutOptions = {}): AwakeTimeout {
  const controller = new AbortController()
  const started = now()
  let timer: ReturnType<typeof setTimeout> | undefined
  const arm = (waitMs: number): void => {
    const setAt = now()
    const loopAtArm = options.whileBusy === true ? performance.eventLoopUtilization() : undefined
    timer = setTimeout(() => {
      const busy = loopAtArm !== undefined && performance.eventLoopUtilization(loopAtArm).utilization > BUSY_UTILIZATION
      const again = nextWait(ms, started, setAt, waitMs, now(), busy)
      if (again > 0) arm(again)
      else controller.abort(new DOMException(`no answer within ${ms} ms of our own time awake`, 'TimeoutError'))
    }, waitMs)
    // As AbortSignal.timeout's: it does not hold the process open.
    timer.unref()
  }
  arm(ms)
  return { signal: controller.signal, clear: () => { clearTimeout(timer) } }
}
