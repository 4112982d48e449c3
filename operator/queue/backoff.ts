/**
 * Per-key exponential back-off (client-go's ItemExponentialFailureRateLimiter): the n-th
 * consecutive failure of a key waits base * 2^(n-1), capped; forget() resets after a success.
 */
export class ExponentialBackoff {
  private readonly failures = new Map<string, number>()

  constructor (readonly baseMs = 5, readonly maxMs = 300_000) {}

  /** Delay before the next retry of key, counting this failure. */
  next (key: string): number {
    const n = (this.failures.get(key) ?? 0) + 1
    this.failures.set(key, n)
    return Math.min(this.maxMs, this.baseMs * 2 ** Math.min(n - 1, 40))
  }

  retries (key: string): number { return this.failures.get(key) ?? 0 }

  forget (key: string): void { this.failures.delete(key) }
}
