/**
 * A de-duplicating work queue with the client-go contract: a key waits in the queue at most once;
 * a key being processed is never handed to a second worker, and if it is added meanwhile it is
 * queued again when the first run calls done(); failed keys come back after exponential back-off.
 */
import { ExponentialBackoff } from './backoff.js'

export interface QueueObserver {
  added (): void
  retried (): void
  depth (n: number): void
  waited (seconds: number): void
}

const NOOP: QueueObserver = { added () {}, retried () {}, depth () {}, waited () {} }

export class WorkQueue {
  private readonly queue: string[] = []
  private readonly dirty = new Set<string>()
  private readonly processing = new Set<string>()
  private readonly addedAt = new Map<string, number>()
  private readonly timers = new Map<string, NodeJS.Timeout>()
  private readonly waiters: Array<(key: string | undefined) => void> = []
  private shuttingDown = false

  constructor (readonly backoff = new ExponentialBackoff(), private readonly observer: QueueObserver = NOOP) {}

  get length (): number { return this.queue.length }
  get active (): number { return this.processing.size }

  add (key: string): void {
    if (this.shuttingDown || this.dirty.has(key)) return
    this.observer.added()
    this.dirty.add(key)
    this.addedAt.set(key, performance.now())
    if (this.processing.has(key)) return
    this.push(key)
  }

  /** Adds key after ms; a later addAfter for the same key keeps the earlier deadline. */
  addAfter (key: string, ms: number): void {
    if (this.shuttingDown) return
    if (ms <= 0) { this.add(key); return }
    if (this.timers.has(key)) return
    const t = setTimeout(() => { this.timers.delete(key); this.add(key) }, ms)
    t.unref()
    this.timers.set(key, t)
  }

  /** Adds key after its back-off delay; use after a failed reconcile. */
  addRateLimited (key: string): void {
    this.observer.retried()
    this.addAfter(key, this.backoff.next(key))
  }

  /** Resets key's back-off; use after a successful reconcile. */
  forget (key: string): void { this.backoff.forget(key) }

  /** Next key to process; undefined once the queue is shut down and drained. */
  async get (): Promise<string | undefined> {
    const key = this.queue.shift()
    if (key !== undefined) return this.take(key)
    if (this.shuttingDown) return undefined
    return await new Promise(resolve => this.waiters.push(resolve))
  }

  /** Marks key finished; a key added while it ran is queued again now. */
  done (key: string): void {
    this.processing.delete(key)
    if (this.dirty.has(key)) this.push(key)
  }

  shutDown (): void {
    this.shuttingDown = true
    for (const t of this.timers.values()) clearTimeout(t)
    this.timers.clear()
    for (const w of this.waiters.splice(0)) w(undefined)
  }

  private push (key: string): void {
    const w = this.waiters.shift()
    if (w !== undefined) { w(this.take(key)); return }
    this.queue.push(key)
    this.observer.depth(this.queue.length)
  }

  private take (key: string): string {
    this.dirty.delete(key)
    this.processing.add(key)
    const at = this.addedAt.get(key)
    if (at !== undefined) { this.observer.waited((performance.now() - at) / 1000); this.addedAt.delete(key) }
    this.observer.depth(this.queue.length)
    return key
  }
}

/**
 * Runs n workers until the queue shuts down. Each key is handled by one worker at a time; a
 * handler that throws gets its key retried with back-off, one that returns a delay is requeued.
 */
export async function runWorkers (queue: WorkQueue, n: number, handle: (key: string) => Promise<number | undefined>,
  onError: (key: string, err: unknown) => void): Promise<void> {
  const worker = async (): Promise<void> => {
    for (;;) {
      const key = await queue.get()
      if (key === undefined) return
      try {
        const requeueMs = await handle(key)
        queue.forget(key)
        if (requeueMs !== undefined) queue.addAfter(key, requeueMs)
      } catch (err) {
        onError(key, err)
        queue.addRateLimited(key)
      } finally {
        queue.done(key)
      }
    }
  }
  await Promise.all(Array.from({ length: n }, worker))
}
