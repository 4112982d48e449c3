import { accumulateDistance } from '../../kernels/reduce-kernels.js'

/**
 * ‖sent − now‖ / ‖sent‖ over all tensors (‖sent − now‖ for all-zero input): how far a round moved
 * the trainer, accumulated chunk by chunk so a region never needs a second full copy. The sums are
 * float64 in the 8 lanes of accumulateDistance (four per quantity, the SIMD kernel's order), so the
 * region path (WebAssembly) and the body paths (JavaScript) give the same bits for the same values.
 */
export class DistanceSum {
  readonly lanes = new Float64Array(8)
  /** Values summed so far (through add). */
  elements = 0

  add (sent: Float32Array, now: Float32Array): void {
    accumulateDistance(this.lanes, sent, now)
    this.elements += sent.length
  }

  get value (): number {
    const l = this.lanes
    const diff = (l[0] + l[1]) + (l[2] + l[3])
    const norm = (l[4] + l[5]) + (l[6] + l[7])
    return norm === 0 ? Math.sqrt(diff) : Math.sqrt(diff / norm)
  }
}

export function relativeDistance (sent: readonly Float32Array[], now: readonly Float32Array[]): number {
  const sum = new DistanceSum()
  sent.forEach((a, t) => { sum.add(a, now[t]) })
  return sum.value
}
