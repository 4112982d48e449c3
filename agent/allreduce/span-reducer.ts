import type { Part } from './partition.js'

export type PartResult = { readonly partIndex: number, readonly mean: Float32Array | null }

/**
 * The reducer's side of one span: weighted sums per part, finished in order once every sender
 * still alive has contributed. A banned sender counts for the parts it already delivered and is
 * left out of the rest, so one dead or hostile sender costs only its own contribution.
 */
export class SpanReducer {
  /** Float64 sums: finite float32 contributions times finite weights cannot overflow them. */
  private readonly sums = new Map<number, Float64Array>()
  private readonly weightSums: Float64Array
  /** Parts contributed so far, per sender slot (senders contribute in order). */
  private readonly delivered: Int32Array
  private readonly banned: Uint8Array
  private completed = 0
  private progressWaiters: Array<() => void> = []

  constructor (
    readonly parts: readonly Part[],
    private readonly senderWeights: readonly number[],
    private readonly onPartDone: (result: PartResult) => void
  ) {
    this.weightSums = new Float64Array(parts.length)
    this.delivered = new Int32Array(senderWeights.length)
    this.banned = new Uint8Array(senderWeights.length)
    if (parts.length === 0) this.completed = 0
  }

  get done (): boolean { return this.completed >= this.parts.length }
  get completedParts (): number { return this.completed }
  nextPartOf (slot: number): number { return this.delivered[slot] }
  isBanned (slot: number): boolean { return this.banned[slot] === 1 }

  /** Adds sender `slot`'s values for its next part (relative index k). */
  contribute (slot: number, k: number, values: Float32Array): void {
    if (this.banned[slot] === 1 || k !== this.delivered[slot] || k >= this.parts.length) return
    const weight = this.senderWeights[slot]
    if (weight > 0) {
      let sum = this.sums.get(k)
      if (sum == null) { sum = new Float64Array(this.parts[k].length); this.sums.set(k, sum) }
      if (weight === 1) for (let i = 0; i < sum.length; i++) sum[i] += values[i]
      else for (let i = 0; i < sum.length; i++) sum[i] += weight * values[i]
      this.weightSums[k] += weight
    }
    this.delivered[slot] = k + 1
    this.advance()
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

  /** Resolves once the reducer finished part k-window or better: bounds how far a fast sender runs ahead. */
  async waitUntilWithin (k: number, window: number): Promise<void> {
    while (k - this.completed >= window && !this.done) {
      await new Promise<void>(resolve => this.progressWaiters.push(resolve))
    }
  }

  private advance (): void {
    let progressed = false
    while (this.completed < this.parts.length && this.isComplete(this.completed)) {
      const k = this.completed
      const sum = this.sums.get(k)
      const weight = this.weightSums[k]
      this.sums.delete(k)
      let mean: Float32Array | null = null
      if (weight > 0 && sum != null) {
        const out = new Float32Array(sum.length)
        for (let i = 0; i < sum.length; i++) out[i] = sum[i] / weight
        mean = out
      }
      this.completed++
      progressed = true
      this.onPartDone({ partIndex: k, mean })
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
