import { PeerMode, type PeerInfo } from '../proto/averaging.js'
import type { CompressionName } from '../compression/index.js'

/**
 * Delta rounds. Members that land a round whole (every part's mean, averagingAlpha 1) leave it with
 * bit-identical tensors: each part's mean goes to every member as the same bytes, and a reducer takes
 * its own span's mean as the others decode it (reducer-side.ts). Each member keeps a copy of that
 * result, its *base*, under the round's group id. When every state-holding member of the next group
 * declares the same base (PeerInfo.base), a lossy codec carries each member's change since the base
 * (its values − base) instead of its values, and every member lands base + the mean change. That is
 * the same weighted mean (base + Σwᵢ(xᵢ − base)/Σwᵢ = Σwᵢxᵢ/Σwᵢ), with the codec's error relative to the
 * change, not to the values: float16 of a training update instead of float16 of the weights.
 *
 * Correctness needs only that the bases are equal, not that they relate to the tensors: a trainer
 * may send anything (a restored checkpoint, a state download); the change is then large and the
 * codec's error with it. The copy costs one float32 copy of the averaged tensors, kept only where it
 * fits (`fits`), and only in swarms whose codec can be lossy (float16, the 8-bit ones, auto).
 */
export class DeltaBase {
  private readonly ids: Array<Uint8Array | undefined>
  private readonly values: Array<Float32Array | undefined>
  private refusedOnce = false

  /**
   * `sizes`: each tensor's element count, in registered order. `fits(bytes)`: whether a copy of that
   * many more bytes fits the agent's memory. `onRefused` hears, once, that a base did not fit.
   */
  constructor (private readonly sizes: readonly number[], private readonly fits: (bytes: number) => boolean, private readonly onRefused?: (bytes: number) => void) {
    this.ids = sizes.map(() => undefined)
    this.values = sizes.map(() => undefined)
  }

  /** The base id every tensor of the step (`indices`) holds, or an empty array when they hold none, or several. */
  idFor (indices: readonly number[]): Uint8Array {
    const first = this.ids[indices[0]]
    if (first === undefined) return new Uint8Array(0)
    for (const i of indices) if (this.ids[i] === undefined || !sameBytes(this.ids[i]!, first)) return new Uint8Array(0)
    return first
  }

  /** The tensors become their change since the base, in place (a delta round's start). */
  subtract (indices: readonly number[], tensors: readonly Float32Array[]): void {
    indices.forEach((i, k) => {
      const base = this.values[i]!
      const t = tensors[k]
      for (let j = 0; j < t.length; j++) t[j] -= base[j]
    })
  }

  /** The tensors become base + what they hold (a delta round's end: the mean change, or our own where a part stayed local). */
  add (indices: readonly number[], tensors: readonly Float32Array[]): void {
    indices.forEach((i, k) => {
      const base = this.values[i]!
      const t = tensors[k]
      for (let j = 0; j < t.length; j++) t[j] += base[j]
    })
  }

  /** After a round landed whole: the tensors are the group's common result, our base from now on. */
  keep (indices: readonly number[], tensors: readonly Float32Array[], groupId: Uint8Array): void {
    const missing = indices.reduce((n, i) => n + (this.values[i] === undefined ? this.sizes[i] * 4 : 0), 0)
    if (missing > 0 && !this.fits(missing)) {
      if (!this.refusedOnce) this.onRefused?.(missing)
      this.refusedOnce = true
      this.forget(indices)
      return
    }
    const id = groupId.slice()
    indices.forEach((i, k) => {
      this.values[i] ??= new Float32Array(this.sizes[i])
      this.values[i]!.set(tensors[k])
      this.ids[i] = id
    })
  }

  /** The tensors no longer hold a result the group shares (a part kept local, a failed round). */
  forget (indices: readonly number[]): void {
    for (const i of indices) this.ids[i] = undefined
  }
}

/** Whether codec `name` loses precision, so that sending changes instead of values pays. */
export function lossy (name: CompressionName): boolean {
  return name !== 'none'
}

/**
 * Whether this group's round is a delta round: its codec is lossy and every member that holds state
 * (not auxiliary) declared the same, non-empty base. Every member computes it from the same gathered
 * infos, so all agree; a member of an agent that predates bases declares none, and the round carries
 * values as before.
 */
export function isDeltaRound (infos: readonly PeerInfo[], codec: CompressionName): boolean {
  if (!lossy(codec)) return false
  const holders = infos.filter(i => i.mode !== PeerMode.AUXILIARY)
  if (holders.length === 0) return false
  const first = holders[0].base
  return first != null && first.byteLength > 0 && holders.every(i => i.base != null && sameBytes(i.base, first))
}

function sameBytes (a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false
  return true
}
