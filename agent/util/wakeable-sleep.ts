/** A sleep that another part of the program can cut short (a follower joined, the group assembled). */
export class Wakeup {
  private wake: (() => void) | null = null

  async sleep (ms: number): Promise<void> {
    if (ms <= 0) return
    await new Promise<void>(resolve => {
      const timer = setTimeout(done, ms)
      function done (): void { clearTimeout(timer); resolve() }
      this.wake = done
    })
    this.wake = null
  }

  notify (): void {
    this.wake?.()
  }
}

/**
 * Waits for `promise` to settle, for at most `ms`, or until `signal` aborts; never throws (a
 * rejection counts as settled). Returns whether it settled in time.
 */
export async function untilOrDeadline (promise: Promise<unknown>, ms: number, signal?: AbortSignal): Promise<boolean> {
  if (ms <= 0 || signal?.aborted === true) return false
  let timer: NodeJS.Timeout | undefined
  let onAbort: (() => void) | undefined
  try {
    return await Promise.race([
      promise.then(() => true, () => true),
      new Promise<boolean>(resolve => {
        timer = setTimeout(() => { resolve(false) }, ms)
        onAbort = () => { resolve(false) }
        signal?.addEventListener('abort', onAbort, { once: true })
      })
    ])
  } finally {
    clearTimeout(timer)
    if (onAbort !== undefined) signal?.removeEventListener('abort', onAbort)
  }
}
