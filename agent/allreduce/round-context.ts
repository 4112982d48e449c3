import { makePlan, partView, type AllReducePlan } from './plan.js'
import { Timeline } from './timeline.js'
import { createReduceKernels, type ReduceKernels } from '../kernels/reduce-kernels.js'
import { PART_WINDOW } from './aggregate-protocol.js'
import type { AllReduceOptions } from './runner.js'
import type { Part } from './partition.js'

/**
 * What both sides of one all-reduce share (runner.ts): the plan and our place in it, the round's
 * abort, its timeline and byte counts, the kernels' staging buffer, and the liveness checks either
 * side asks of a late member.
 */
export class RoundContext {
  readonly plan: AllReducePlan
  /** Our index in the group. */
  readonly me: number
  /** Our place among the senders (-1: an auxiliary peer, which reduces but contributes no tensors). */
  readonly mySlot: number
  /** The parts of the group's vector we reduce for everyone. */
  readonly spanParts: readonly Part[]
  /** Aborted when the round is over for us: the all-reduce timeout, or a hand-off. */
  readonly abort = new AbortController()
  readonly started = Date.now()
  /** Milestones of this round, for the debug log (who was late, where the tail went). */
  readonly timeline = new Timeline()
  /**
   * Checks and sums; every part is decoded into its staging buffer, then checked and consumed
   * before the next await (so the two sides can share it).
   */
  readonly kernels: ReduceKernels
  bytesSent = 0
  bytesReceived = 0
  /** Parts of our tensors left unaveraged this round, by either side. */
  partsKeptLocal = 0
  /** Liveness checks waiting for bytes from each member (group index), in either role (checkAlive). */
  private readonly awaitingBytes = new Map<number, Array<() => void>>()

  constructor (readonly options: AllReduceOptions) {
    const { group } = options
    this.plan = makePlan(group.infos, options.tensors.map(t => t.length), options.partSizeBytes, options.codec)
    this.me = group.myIndex
    this.mySlot = this.plan.senders.indexOf(this.me)
    this.spanParts = this.plan.parts.slice(this.plan.spanStart[this.me], this.plan.spanEnd[this.me])
    this.kernels = createReduceKernels(this.spanParts.length > 0 ? PART_WINDOW : 0, Math.max(1, this.plan.maxPartElements), options.kernels)
  }

  /** The peer id of member m (group index). */
  peer (m: number): string { return this.options.group.peerIds[m] }

  get aliveCheckMs (): number { return this.options.aliveCheckMs ?? this.options.deadlineSlackMs / 2 }

  /** local += alpha * (mean - local) on one part of our tensors. */
  applyMean (part: Part, mean: Float32Array): void {
    const local = partView(this.options.tensors, this.plan, part)
    const alpha = this.options.alpha
    if (alpha === 1) local.set(mean)
    else for (let i = 0; i < local.length; i++) local[i] += alpha * (mean[i] - local[i])
  }

  /** A frame from member m arrived: the liveness checks waiting on it have their answer. */
  heardFrom (m: number): void {
    const waiting = this.awaitingBytes.get(m)
    if (waiting === undefined) return
    this.awaitingBytes.delete(m)
    for (const resolve of waiting) resolve()
  }

  /**
   * Whether member m (group index), late as a sender or with its means as a reducer, answers a
   * liveness check (late-checks.ts), or sends us a frame in its other role while the check runs: on
   * the libp2p data path the check travels the connection that carries its parts and means, behind
   * them (four agents × 25M over libp2p on 100 Mbit/s links cut healthy members off for checks
   * unanswered in 2 s while their parts were arriving). Only bytes sent after the check began count:
   * a member frozen mid-transfer still delivers what was in flight.
   */
  async checkAlive (m: number, role: 'sender' | 'reducer'): Promise<boolean | 'unknown'> {
    const peer = this.peer(m)
    let heard = (): void => {}
    const bytes = new Promise<'bytes'>(resolve => { heard = () => { resolve('bytes') } })
    this.awaitingBytes.set(m, [...(this.awaitingBytes.get(m) ?? []), heard])
    const verdict = await Promise.race([bytes, this.options.alive!(peer, this.aliveCheckMs, this.abort.signal)])
    const waiting = this.awaitingBytes.get(m)?.filter(w => w !== heard)
    if (waiting !== undefined && waiting.length > 0) this.awaitingBytes.set(m, waiting)
    else this.awaitingBytes.delete(m)
    if (verdict === 'bytes') {
      if (!this.abort.signal.aborted) this.options.log?.debug(`${role} ${peer}, late, sent us bytes while we checked: alive, waiting on`)
      return true
    }
    const answered = verdict
    if (!this.abort.signal.aborted) {
      this.options.log?.debug(`${role} ${peer}, late, ${answered === 'unknown' ? 'gave no verdict to a liveness check: judged at its limit' : answered ? 'answered a liveness check: waiting on' : 'did not answer a liveness check'}`)
    }
    return answered
  }
}
