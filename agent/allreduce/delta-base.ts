import { PeerMode, type PeerInfo } from '../proto/averaging.js'
import type { CompressionName } from '../compression/index.js'
import { equalBytes } from '../util/bytes.js'

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
 * The all-reduce does the arithmetic in passes it makes anyway (round-context.ts): a part's change is
 * taken as the part is encoded or contributed, base + mean change as it lands, and the result goes
 * into the base buffer then too. Correctness needs only that the bases are equal, not that they
 * relate to the tensors: a trainer may send anything (a restored checkpoint, a state download); the
 * change is then large and the codec's error with it. The base costs one float32 copy of the averaged
 * tensors, kept only where it fits (`fits`), and only in swarms whose codec can be lossy (float16,
 * the 8-bit ones, auto).
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
    for (const i of indices) if (this.ids[i] === undefined || !equalBytes(this.ids[i]!, first)) return new Uint8Array(0)
    return first
  }

  /**
   * The base buffers of the step's tensors (`indices`), allocated where missing, for the round to
   * write each part's result into as it lands (and, in a delta round, to send changes against first);
   * undefined when a missing one does not fit (then the round keeps no base). The round must land
   * whole before `landed` makes them a base again: until then they hold some old, some new values.
   */
  buffersFor (indices: readonly number[]): Float32Array[] | undefined {
    const missing = indices.reduce((n, i) => n + (this.values[i] === undefined ? this.sizes[i] * 4 : 0), 0)
    if (missing > 0 && !this.fits(missing)) {
      if (!this.refusedOnce) this.onRefused?.(missing)
      this.refusedOnce = true
      return undefined
    }
    return indices.map(i => (this.values[i] ??= new Float32Array(this.sizes[i])))
  }

  /** The round landed whole: its result, now in the buffers, is the tensors' base, under the round's group id. */
  landed (indices: readonly number[], groupId: Uint8Array): void {
    const id = groupId.slice()
    for (const i of indices) this.ids[i] = id
  }

  /** The buffers no longer hold a result the group shares (a part kept local, a failed round, a round without them). */
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
  return lossy(codec) && sharedBase(infos)
}

/**
 * Whether every member that holds state (not auxiliary) declared the same, non-empty id in `field`:
 * PeerInfo.base (delta rounds) or PeerInfo.outerState (an outer step's shared θ, m: agent/outer/outer-step.ts).
 */
export function sharedBase (infos: readonly PeerInfo[], field: 'base' | 'outerState' = 'base'): boolean {
  const holders = infos.filter(i => i.mode !== PeerMode.AUXILIARY)
  if (holders.length === 0) return false
  const first = holders[0][field]
  return first != null && first.byteLength > 0 && holders.every(i => i[field] != null && equalBytes(i[field], first))
}
