import { createHash } from 'node:crypto'
import { PeerMode } from '../proto/averaging.js'
import type { GroupInfo } from '../matchmaking/group-info.js'
import { partView, type AllReducePlan } from './plan.js'
import type { AllReduceResult } from './runner.js'

/**
 * Span repair: a reducer that dies or freezes before it answers anything leaves its whole span
 * unaveraged (hivemind keeps those values local too), so its group leaves the round agreeing on
 * every span but that one. In a Moshpit grid that quarter of disagreement (groups of four) is carried
 * into every later round: a model of our grid rule with one peer of 64 dying per round right after
 * its group formed ends round 4 at a largest deviation of 7.7e-2 when the span stays local, 3.2e-2
 * when the survivors average it among themselves, the same as if the peer had died before the
 * round. So the survivors run a second, smaller butterfly all-reduce over the failed reducers' spans,
 * among themselves, with the same runner: a group of the members that did not fail, spans spread
 * over them by their bandwidth as any round's are, each part's mean the weighted mean of the
 * survivors. A member takes part only when every reducer it lost sent it nothing (no mean of the
 * span is mixed with a mean of another set of senders), or left mid-span and said where it stopped
 * (a preemption notice shorter than the round: AllReduceRunner.handOff sends every sender the same
 * means and then the same part index, so the rest of its span is repaired); the repair's group id is
 * derived from the round's, the failed reducers and where each stopped, so members that saw
 * different reducers fail, or stop at different parts, never meet in one repair: a member whose round ended without a repair answers a repair's stream at once that it
 * runs none (agent/allreduce/aggregate-handler.ts), and the asker keeps those parts local, as before,
 * and leaves it out as a sender of its own sub-span (reducer-side.ts, leaveOutAbsentSender) instead of waiting for it.
 */
export interface SpanRepair {
  /** The id of the round repaired: every stream's header names it, so members that run no repair of it say so at once. */
  readonly repairOf: Uint8Array
  /** The survivors: the round's group without the failed reducers (and without auxiliary peers, who hold no tensors). */
  readonly group: GroupInfo
  /** Views of our tensors over the failed reducers' parts, one per part: the repair's means land in place. */
  readonly tensors: Float32Array[]
  /** The same views of the round's base buffers, when it had them (AllReduceOptions.base). */
  readonly base?: Float32Array[]
  /** Parts of the group's vector the repair covers. */
  readonly parts: number
}

/**
 * The repair's group id: the round's, which members failed (sorted group indices), and for a
 * reducer that handed off mid-span the part of its span it stopped at (`from`; a reducer that
 * answered nothing hashes as it always has, so agents without hand-offs still meet in its repair).
 */
export function repairGroupId (groupId: Uint8Array, failed: readonly number[], from?: ReadonlyMap<number, number>): Uint8Array {
  const hash = createHash('sha256').update('avs span repair\n').update(groupId)
  for (const r of [...failed].sort((a, b) => a - b)) {
    const k = from?.get(r) ?? 0
    hash.update(k === 0 ? `${r}\n` : `${r}@${k}\n`)
  }
  return new Uint8Array(hash.digest().subarray(0, 20))
}

/**
 * The repair our round calls for, or null: nothing failed, a failed reducer had answered in part
 * without handing the rest off, or too few are left.
 */
export function planRepair (group: GroupInfo, plan: AllReducePlan, tensors: readonly Float32Array[], result: Pick<AllReduceResult, 'failedReducers' | 'unansweredReducers' | 'handedOffReducers'>, base?: readonly Float32Array[]): SpanRepair | null {
  if (result.failedReducers.length === 0) return null
  // Where each failed reducer's span is still ours, relative to its start.
  const from = new Map<number, number>()
  for (const peer of result.failedReducers) {
    const r = group.peerIds.indexOf(peer)
    const k = result.unansweredReducers.includes(peer) ? 0 : result.handedOffReducers[peer]
    if (r < 0 || k === undefined) return null
    from.set(r, k)
  }
  const failed = [...from.keys()]
  const out = new Set(failed)
  const members = group.peerIds.map((_, i) => i).filter(i => !out.has(i) && group.infos[i].mode !== PeerMode.AUXILIARY)
  // Two to average, and someone to reduce: clients send only.
  if (members.length < 2 || !members.includes(group.myIndex) || !members.some(i => group.infos[i].mode === PeerMode.NODE)) return null
  const parts = failed.sort((a, b) => a - b).flatMap(r => plan.parts.slice(plan.spanStart[r] + (from.get(r) ?? 0), plan.spanEnd[r]))
  if (parts.length === 0) return null
  return {
    repairOf: group.groupId,
    group: {
      groupId: repairGroupId(group.groupId, failed, from),
      peerIds: members.map(i => group.peerIds[i]),
      infos: members.map(i => group.infos[i]),
      myIndex: members.indexOf(group.myIndex),
      leader: group.leader
    },
    tensors: parts.map(part => partView(tensors, plan, part)),
    ...(base !== undefined ? { base: parts.map(part => partView(base, plan, part)) } : {}),
    parts: parts.length
  }
}

/** The round's result with its repair's folded in: repaired parts are no longer kept local. */
export function withRepair (round: AllReduceResult, repair: AllReduceResult, parts: number): AllReduceResult {
  const union = (a: readonly string[], b: readonly string[]): string[] => [...new Set([...a, ...b])]
  return {
    ...round,
    durationMs: round.durationMs + repair.durationMs,
    bytesSent: round.bytesSent + repair.bytesSent,
    bytesReceived: round.bytesReceived + repair.bytesReceived,
    failedReducers: union(round.failedReducers, repair.failedReducers),
    unansweredReducers: union(round.unansweredReducers, repair.unansweredReducers),
    handedOffReducers: { ...repair.handedOffReducers, ...round.handedOffReducers },
    bannedSenders: union(round.bannedSenders, repair.bannedSenders),
    cutOffSenders: { adaptive: union(round.cutOffSenders.adaptive, repair.cutOffSenders.adaptive), fixed: union(round.cutOffSenders.fixed, repair.cutOffSenders.fixed) },
    cutOffReducers: { adaptive: union(round.cutOffReducers.adaptive, repair.cutOffReducers.adaptive), fixed: union(round.cutOffReducers.fixed, repair.cutOffReducers.fixed) },
    partsReduced: round.partsReduced + repair.partsReduced,
    partsKeptLocal: round.partsKeptLocal - parts + repair.partsKeptLocal,
    repairedParts: parts - repair.partsKeptLocal,
    channels: { direct: round.channels.direct + repair.channels.direct, libp2p: round.channels.libp2p + repair.channels.libp2p },
    reusedChannels: round.reusedChannels + repair.reusedChannels
  }
}
