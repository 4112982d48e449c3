import type { ReduceKernels } from '../kernels/reduce-kernels.js'
import type { Part } from './partition.js'
import { lendWireMemory, returnWireMemory } from '../net/wire-memory.js'

/**
 * A finished part: its mean, or null when nobody contributed weight or the mean left float32's range.
 * The mean is in lent wire memory (wire-memory.ts): its last user gives it back.
 */
export type PartResult = { readonly partIndex: number, readonly mean: Float32Array | null, readonly overflowed: boolean }

/**
 * The reducer's side of one span: weighted sums per part, finished in order once every sender
 * still alive has contributed. A banned sender counts for the parts it already delivered and is
 * left out of the rest, so one dead or hostile sender costs only its own contribution. Sums live
 * in the kernels' slots, part k in slot k mod window: callers never run more than `window` parts
 * ahead of the oldest unfinished one (waitUntilWithin), so a slot is free again when reused.
 */
export class SpanReducer {
  private readonly weightSums: Float64Array
  /** Parts contributed so far, per sender slot (senders contribute in order). */
  private readonly delivered: Int32Array
  private readonly banned: Uint8Array
  private completed = 0
  /** Set by stop(): no further part finishes, whatever arrives. */
  private stopped = false
  private progressWaiters: Array<() => void> = []

  constructor (
    readonly parts: readonly Part[],
    private readonly senderWeights: readonly number[],
    private readonly kernels: ReduceKernels,
    private readonly window: number,
    private readonly onPartDone: (result: PartResult) => void
  ) {
    this.weightSums = new Float64Array(parts.length)
    this.delivered = new Int32Array(senderWeights.length)
    this.banned = new Uint8Array(senderWeights.length)
  }

  /** Every part finished, or the reducer stopped (stop()): nothing more will finish. */
  get done (): boolean { return this.completed >= this.parts.length || this.stopped }
  get completedParts (): number { return this.completed }
  nextPartOf (slot: number): number { return this.delivered[slot] }
  isBanned (slot: number): boolean { return this.banned[slot] === 1 }

  /**
   * Adds sender `slot`'s values for its next part (relative index k), read from the kernels'
   * staging buffer. With `check`, values holding a NaN or an infinity are refused (false) and
   * nothing is added; the caller bans the sender. Late or out-of-order parts are ignored.
   */
  contribute (slot: number, k: number, check: boolean): boolean {
    if (this.banned[slot] === 1 || k !== this.delivered[slot] || k >= this.parts.length || this.stopped) return true
    if (k - this.completed >= this.window) throw new RangeError(`part ${k} is more than ${this.window} parts ahead of part ${this.completed}`)
    const weight = this.senderWeights[slot]
    const n = this.parts[k].length
    if (weight > 0) {
      if (!this.kernels.accumulate(k % this.window, n, weight, check)) return false
      this.weightSums[k] += weight
    } else if (check && !this.kernels.allFinite(n)) {
      return false
    }
    this.delivered[slot] = k + 1
    this.advance()
    return true
  }

  /** Leaves a sender out of every part it has not delivered yet. */
  ban (slot: number): void {
    if (this.banned[slot] === 1) return
    this.banned[slot] = 1
    this.advance()
  }

  /** Bans everyone still owing parts: used when the round's time is up. */
  banAll (): void {
    for (let s = 0; s < this.banned.length; s++) this.banned[s] = 1
    this.advance()
  }

  /**
   * Finishes no further part, and wakes everyone waiting on progress: a leaving reducer hands the
   * rest of its span to its senders (AllReduceRunner.handOff). Returns the parts finished, whose
   * means have all gone to onPartDone.
   */
  stop (): number {
    if (!this.stopped) {
      this.stopped = true
      const waiters = this.progressWaiters
      this.progressWaiters = []
      for (const wake of waiters) wake()
    }
    return this.completed
  }

  /** Resolves once the reducer finished part k-window or better: bounds how far a fast sender runs ahead. */
  async waitUntilWithin (k: number, window: number): Promise<void> {
    while (k - this.completed >= window && !this.done) {
      await new Promise<void>(resolve => this.progressWaiters.push(resolve))
    }
  }

  private advance (): void {
    if (this.stopped) return
    let progressed = false
    while (this.completed < this.parts.length && this.isComplete(this.completed)) {
      const k = this.completed
      const weight = this.weightSums[k]
      const n = this.parts[k].length
      let mean: Float32Array | null = null
      let overflowed = false
      if (weight > 0) {
        const memory = lendWireMemory(4 * n)
        mean = this.kernels.takeMean(k % this.window, n, weight, new Float32Array(memory.buffer, memory.byteOffset, n))
        overflowed = mean == null
        if (overflowed) returnWireMemory(memory)
      }
      this.completed++
      progressed = true
      this.onPartDone({ partIndex: k, mean, overflowed })
    }
    if (progressed) {
      const waiters = this.progressWaiters
      this.progressWaiters = []
      for (const wake of waiters) wake()
    }
  }

  private isComplete (k: number): boolean {
    for (let s = 0; s < this.delivered.length; s++) {
      if (this.delivered[s] <= k && this.banned[s] === 0) return false
    }
    return true
  }
}
