/**
 * The traffic of one butterfly all-reduce without the arithmetic: every peer sends 2·S/n bytes to
 * every other peer (its span to the span's reducer, then the reduced span back) and receives as
 * much, all pairs at once. The time this takes over a transport is the floor under any all-reduce
 * on that transport.
 */

/** Bytes each peer sends to each other peer in one round: 2·S/n with S the tensor's bytes. */
export function pairBytes (elements: number, world: number): number {
  return Math.floor((2 * elements * 4) / world)
}

/** Counts the bytes arriving in one round and resolves when all of them have arrived. */
export class RoundReceiver {
  private received = 0
  private expected = 0
  private done: PromiseWithResolvers<void> = Promise.withResolvers<void>()

  /** Called before each round (untimed). */
  reset (expected: number): void {
    this.received = 0
    this.expected = expected
    this.done = Promise.withResolvers<void>()
    if (expected === 0) this.done.resolve()
  }

  add (bytes: number): void {
    this.received += bytes
    if (this.received > this.expected) this.done.reject(new Error(`received ${this.received} bytes in a round that carries ${this.expected}`))
    else if (this.received === this.expected) this.done.resolve()
  }

  fail (err: Error): void { this.done.reject(err) }

  get complete (): Promise<void> { return this.done.promise }

  get progress (): string { return `${this.received} of ${this.expected} bytes` }
}
