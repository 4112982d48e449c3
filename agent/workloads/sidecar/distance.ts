/**
 * ‖sent − now‖ / ‖sent‖ over all tensors (‖sent − now‖ for all-zero input): how far a round moved
 * the trainer, accumulated chunk by chunk so a region never needs a second full copy.
 */
export class DistanceSum {
  private diff = 0
  private norm = 0

  add (sent: Float32Array, now: Float32Array): void {
    for (let i = 0; i < sent.length; i++) {
      const d = sent[i] - now[i]
      this.diff += d * d
      this.norm += sent[i] * sent[i]
    }
  }

  get value (): number {
    return this.norm === 0 ? Math.sqrt(this.diff) : Math.sqrt(this.diff / this.norm)
  }
}

export function relativeDistance (sent: readonly Float32Array[], now: readonly Float32Array[]): number {
  const sum = new DistanceSum()
  sent.forEach((a, t) => { sum.add(a, now[t]) })
  return sum.value
}
