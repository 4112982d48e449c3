import { makePlan, partView, type AllReducePlan } from './plan.js'
import { Timeline } from './timeline.js'
import { createReduceKernels, type ReduceKernels } from '../kernels/reduce-kernels.js'
import { PART_WINDOW } from './aggregate-protocol.js'
import { aliveCheckBudgetMs } from './check-budget.js'
import type { AllReduceOptions } from './runner.js'
import type { Part } from './partition.js'
import type { DataChannelKind } from '../net/frame-channel.js'

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
  /** Bytes of parts and means read from each member (group index) this round, and when the last of them came (ms into the round). */
  private readonly bytesFrom: number[]
  private readonly lastFromMs: number[]
  /** Encoded bytes of each member's span (group index). */
  private readonly spanBytes: number[]
  /** Members whose parts or means, either way, take libp2p streams: their checks share that connection (check-budget.ts). */
  private readonly onLibp2p = new Set<number>()
  /** The bound each member's latest liveness check ran under (for the cut-off's message). */
  private readonly checkedWithin = new Map<number, number>()

  constructor (readonly options: AllReduceOptions) {
    const { group } = options
    this.plan = makePlan(group.infos, options.tensors.map(t => t.length), options.partSizeBytes, options.codec)
    this.me = group.myIndex
    this.mySlot = this.plan.senders.indexOf(this.me)
    this.spanParts = this.plan.parts.slice(this.plan.spanStart[this.me], this.plan.spanEnd[this.me])
    this.kernels = createReduceKernels(this.spanParts.length > 0 ? PART_WINDOW : 0, Math.max(1, this.plan.maxPartElements), options.kernels)
    this.bytesFrom = group.peerIds.map(() => 0)
    this.lastFromMs = group.peerIds.map(() => 0)
    this.spanBytes = group.peerIds.map((_, i) => {
      let bytes = 0
      for (let k = this.plan.spanStart[i]; k < this.plan.spanEnd[i]; k++) bytes += options.codec.encodedLength(this.plan.parts[k].length)
      return bytes
    })
  }

  /** The peer id of member m (group index). */
  peer (m: number): string { return this.options.group.peerIds[m] }

  get aliveCheckMs (): number { return this.options.aliveCheckMs ?? this.options.deadlineSlackMs / 2 }

  /** How long a liveness check of member m may go unanswered (check-budget.ts): more where it shares a connection with parts and means. */
  aliveCheckMsFor (m: number): number {
    if (!this.onLibp2p.has(m)) return this.aliveCheckMs
    return aliveCheckBudgetMs(this.aliveCheckMs, {
      exchangeBytes: this.spanBytes[m] + this.spanBytes[this.me],
      fromMember: { bytes: this.bytesFrom[m], activeMs: this.lastFromMs[m] },
      fromAll: { bytes: this.bytesReceived, activeMs: Math.max(...this.lastFromMs) },
      members: this.bytesFrom.length - 1
    })
  }

  /** The bound member m's latest liveness check ran under. */
  lastCheckMs (m: number): number { return this.checkedWithin.get(m) ?? this.aliveCheckMs }

  /** A channel to or from member m opened: of its kind depends how long m's liveness checks may take. */
  channelWith (m: number, kind: DataChannelKind): void {
    if (kind === 'libp2p') this.onLibp2p.add(m)
  }

  /**
   * Our part as it goes out: a view of its values, or in a delta round its change since the base,
   * written into `into` (at least the part's length; the caller encodes or sums it before its next await).
   */
  outgoing (part: Part, into: Float32Array): Float32Array {
    const values = partView(this.options.tensors, this.plan, part)
    const base = this.options.base
    if (base === undefined || !base.delta) return values
    const from = partView(base.tensors, this.plan, part)
    const out = into.subarray(0, values.length)
    for (let i = 0; i < values.length; i++) out[i] = values[i] - from[i]
    return out
  }

  /**
   * local += alpha * (mean - local) on one part of our tensors; `landed` sees the part before and after.
   * In a delta round `mean` is the mean change and becomes base + it first (it is ours to write: a
   * decoded or lent buffer); with a base the result is written there too.
   */
  applyMean (part: Part, mean: Float32Array): void {
    const local = partView(this.options.tensors, this.plan, part)
    const { alpha, landed, base } = this.options
    if (alpha === 1) {
      if (base !== undefined) {
        const result = partView(base.tensors, this.plan, part)
        if (!base.delta) result.set(mean)
        else {
          for (let i = 0; i < mean.length; i++) {
            const value = mean[i] + result[i]
            mean[i] = value
            result[i] = value
          }
        }
      }
      landed?.(local, mean)
      local.set(mean)
      return
    }
    const before = landed !== undefined ? local.slice() : undefined
    for (let i = 0; i < local.length; i++) local[i] += alpha * (mean[i] - local[i])
    if (before !== undefined) landed?.(before, local)
  }

  /** A frame of `bytes` from member m arrived: counted, and the liveness checks waiting on it have their answer. */
  heardFrom (m: number, bytes: number): void {
    this.bytesReceived += bytes
    this.bytesFrom[m] += bytes
    this.lastFromMs[m] = Date.now() - this.started
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
   * a member frozen mid-transfer still delivers what was in flight. On that path the check is also
   * given the time the bytes ahead of it take (aliveCheckMsFor): a flow can starve for seconds
   * behind its siblings and nothing arrives either way.
   */
  async checkAlive (m: number, role: 'sender' | 'reducer'): Promise<boolean | 'unknown'> {
    const peer = this.peer(m)
    let heard = (): void => {}
    const bytes = new Promise<'bytes'>(resolve => { heard = () => { resolve('bytes') } })
    this.awaitingBytes.set(m, [...(this.awaitingBytes.get(m) ?? []), heard])
    const withinMs = this.aliveCheckMsFor(m)
    this.checkedWithin.set(m, withinMs)
    const verdict = await Promise.race([bytes, this.options.alive!(peer, withinMs, this.abort.signal)])
    const waiting = this.awaitingBytes.get(m)?.filter(w => w !== heard)
    if (waiting !== undefined && waiting.length > 0) this.awaitingBytes.set(m, waiting)
    else this.awaitingBytes.delete(m)
    if (verdict === 'bytes') {
      if (!this.abort.signal.aborted) this.options.log?.debug(`${role} ${peer}, late, sent us bytes while we checked: alive, waiting on`)
      return true
    }
    const answered = verdict
    if (!this.abort.signal.aborted) {
      this.options.log?.debug(`${role} ${peer}, late, ${answered === 'unknown' ? 'gave no verdict to a liveness check: judged at its limit' : answered ? 'answered a liveness check: waiting on' : 'did not answer a liveness check'} (bound ${Math.round(withinMs)} ms)`)
    }
    return answered
  }
}
