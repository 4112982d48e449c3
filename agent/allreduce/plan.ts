import { PeerMode, type PeerInfo } from '../proto/averaging.js'
import { measuredAsEqual, spanFractions, type PeerMode as BalancingMode } from './load-balancing.js'
import { assignParts, elementsPerPart, planParts, type Part } from './partition.js'
import type { Codec } from '../compression/index.js'
import { AveragingError } from '../errors.js'

/** Who sends, who reduces which parts, with what weight: computed identically by every member. */
export interface AllReducePlan {
  readonly parts: readonly Part[]
  /** Element offset of each tensor in the flat vector. */
  readonly tensorBases: readonly number[]
  /** Parts [spanStart[i], spanEnd[i]) are reduced by peer i. */
  readonly spanStart: readonly number[]
  readonly spanEnd: readonly number[]
  /** Peer indices that contribute tensors (everyone but auxiliary peers). */
  readonly senders: readonly number[]
  /** Weight of each peer's contribution (0 for auxiliary peers). */
  readonly weights: readonly number[]
  readonly maxPartElements: number
}

export function toBalancingMode (mode: PeerMode): BalancingMode {
  return mode === PeerMode.CLIENT ? 'client' : mode === PeerMode.AUXILIARY ? 'auxiliary' : 'node'
}

export function makePlan (infos: readonly PeerInfo[], tensorSizes: readonly number[], partSizeBytes: number, codec: Codec): AllReducePlan {
  const modes = infos.map(i => toBalancingMode(i.mode))
  const senders = infos.flatMap((info, i) => info.mode === PeerMode.AUXILIARY ? [] : [i])
  const weights = infos.map(info => info.mode === PeerMode.AUXILIARY ? 0 : info.weight)
  if (senders.length === 0) throw new AveragingError('the group has no peer that contributes tensors (all are auxiliary)')
  const totalWeight = senders.reduce((sum, i) => sum + weights[i], 0)
  if (!(totalWeight > 0)) throw new AveragingError('the total weight of the group is zero, so there is no mean to take')
  const declared = infos.map(i => i.bandwidth ?? null)
  const everyoneSays = infos.every(i => i.bandwidthMeasured !== undefined)
  const fractions = spanFractions(everyoneSays ? measuredAsEqual(declared, infos.map(i => i.bandwidthMeasured === true)) : declared, modes)
  const perPart = elementsPerPart(partSizeBytes, codec.bytesPerElement)
  const parts = planParts(tensorSizes, perPart)
  const counts = assignParts(parts, fractions)
  const spanStart: number[] = []
  const spanEnd: number[] = []
  let next = 0
  for (const count of counts) {
    spanStart.push(next)
    next += count
    spanEnd.push(next)
  }
  const tensorBases: number[] = []
  let base = 0
  for (const size of tensorSizes) { tensorBases.push(base); base += size }
  return { parts, tensorBases, spanStart, spanEnd, senders, weights, maxPartElements: perPart }
}

/** The slice of our tensors that a part covers (a view, no copy). */
export function partView (tensors: readonly Float32Array[], plan: AllReducePlan, part: Part): Float32Array {
  const local = part.offset - plan.tensorBases[part.tensorIndex]
  return tensors[part.tensorIndex].subarray(local, local + part.length)
}
