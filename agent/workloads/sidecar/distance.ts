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

  /** Σ (now − sent)². */
  get diff (): number {
    const l = this.lanes
    return (l[0] + l[1]) + (l[2] + l[3])
  }

  /** Σ sent². */
  get norm (): number {
    const l = this.lanes
    return (l[4] + l[5]) + (l[6] + l[7])
  }

  get value (): number {
    const { diff, norm } = this
    return norm === 0 ? Math.sqrt(diff) : Math.sqrt(diff / norm)
  }
}

/**
 * An outer step's divergence when its group averaged the pseudo-gradients (`moved`: Δ as sent against
 * the mean): how far the round moved θ from the θ' this trainer's own Δ would have given, relative to θ,
 * as a round averaging θ' reports it. θ' − θ = −lr·(1 + μ)·(Δ − mean Δ) with nesterov, −lr·(Δ − mean Δ)
 * without; θ here is the stepped θ (`theta`), within one step of θ'.
 */
export function outerDivergence (moved: DistanceSum, theta: readonly Float32Array[], lr: number, momentum: number, nesterov: boolean): number {
  const norm = new DistanceSum()
  for (const t of theta) norm.add(t, t)
  const scale = lr * (nesterov ? 1 + momentum : 1)
  const diff = scale * Math.sqrt(moved.diff)
  return norm.norm === 0 ? diff : diff / Math.sqrt(norm.norm)
}

export function relativeDistance (sent: readonly Float32Array[], now: readonly Float32Array[]): number {
  const sum = new DistanceSum()
  sent.forEach((a, t) => { sum.add(a, now[t]) })
  return sum.value
}
