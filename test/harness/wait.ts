/** Polls until check() returns a value other than undefined/false, or fails with `what` after timeoutMs. */
import { sleep } from './time.js'

export async function waitFor<T> (what: string, check: () => Promise<T | undefined | false>, timeoutMs = 60_000, intervalMs = 250): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let lastError: unknown
  for (;;) {
    try {
      const value = await check()
      if (value !== undefined && value !== false) return value
    } catch (error) {
      lastError = error
    }
    if (Date.now() > deadline) {
      const detail = lastError instanceof Error ? ` (last error: ${lastError.message})` : ''
      throw new Error(`Timed out after ${timeoutMs / 1000} s waiting for ${what}${detail}.`)
    }
    await sleep(intervalMs)
  }
}
