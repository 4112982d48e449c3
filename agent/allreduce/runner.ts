import type { DataChannelKind, FrameChannel } from '../net/frame-channel.js'
import type { Codec } from '../compression/index.js'
import type { GroupInfo } from '../matchmaking/group-info.js'
import { AveragingError, TimeoutError } from '../errors.js'
import type { AllReducePlan } from './plan.js'
import type { KernelBackend } from '../kernels/reduce-kernels.js'
import type { AggregateDialer } from './aggregate-dialer.js'
import { RoundContext } from './round-context.js'
import { ReducerSide } from './reducer-side.js'
import { SenderSide } from './sender-side.js'
import type { Log } from '../log.js'

export interface AllReduceOptions {
  /** Opens our channel to each reducer (direct TLS or libp2p). */
  readonly dialer: AggregateDialer
  readonly group: GroupInfo
  readonly tensors: readonly Float32Array[]
  readonly codec: Codec
  readonly partSizeBytes: number
  /** local += alpha * (mean - local). */
  readonly alpha: number
  /** Bound on the whole all-reduce. */
  readonly timeoutMs: number
  /** Longest gap a reducer waits for a sender's next part (and for it to show up at all). */
  readonly senderTimeoutMs: number
  /**
   * Least slack the adaptive deadline gives a late sender over the median wait of the others
   * (agent/allreduce/adaptive-deadline.ts); the averager passes two request timeouts.
   */
  readonly deadlineSlackMs: number
  /** Longest gap a sender waits for a reducer's next mean. */
  readonly reducerTimeoutMs: number
  /**
   * Whether a group member answers a liveness check within withinMs (matchmaking's, agent/matchmaking/liveness.ts).
   * Given, a reducer late with its means is checked before the adaptive deadline cuts it off, and
   * one that answers is waited for (ReducerDeadlines.probe): alive, its flow to us only stalled.
   */
  readonly alive?: (peer: string, withinMs: number, signal: AbortSignal) => Promise<boolean | 'unknown'>
  /** The liveness check's bound (the averager passes a request timeout). */
  readonly aliveCheckMs?: number
  /** Which kernels check and sum parts (default: WebAssembly SIMD where the runtime has it). */
  readonly kernels?: KernelBackend
  /** A span repair's runner: the id of the round it repairs, sent in every stream's header (agent/allreduce/repair.ts). */
  readonly repairOf?: Uint8Array
  /** Called as each part of our tensors takes its mean, with the part's values before and after (StepOptions.landed). */
  readonly landed?: (before: Float32Array, after: Float32Array) => void
  /**
   * Buffers shaped as `tensors` into which each part's result is written as it lands (the next base:
   * delta-base.ts; alpha 1 only). With `delta`, what we send of a part is its change since these
   * buffers, the means are mean changes, and a part lands as buffer + mean change.
   */
  readonly base?: { readonly tensors: readonly Float32Array[], readonly delta: boolean }
  readonly log?: Log
}

export interface AllReduceResult {
  readonly groupSize: number
  readonly durationMs: number
  readonly bytesSent: number
  readonly bytesReceived: number
  /** Reducers whose span we kept (partly) local because they failed. */
  readonly failedReducers: readonly string[]
  /** Those of failedReducers that sent us no mean at all: their whole span is still ours (agent/allreduce/repair.ts). */
  readonly unansweredReducers: readonly string[]
  /**
   * Those of failedReducers that left mid-span and said so (TensorPart.handed_off), with how many
   * parts of their span they had answered: the rest is still ours, and every member they told
   * holds the same means before it (agent/allreduce/repair.ts).
   */
  readonly handedOffReducers: Readonly<Record<string, number>>
  /** Senders our span was averaged without (for the parts they did not deliver). */
  readonly bannedSenders: readonly string[]
  /**
   * Those of bannedSenders left out for being late, by the deadline that cut them off: adaptive
   * (median + k·MAD of the others' waits, once a quorum delivered) or fixed (the sender timeout,
   * or the all-reduce timeout).
   */
  readonly cutOffSenders: Readonly<Record<Deadline, readonly string[]>>
  /**
   * Those of failedReducers given up on for being late, by the deadline: adaptive (median + k·MAD
   * of the other reducers' waits, once a majority answered) or fixed (the reducer timeout, or the
   * all-reduce timeout).
   */
  readonly cutOffReducers: Readonly<Record<Deadline, readonly string[]>>
  readonly partsTotal: number
  /** Parts of the group's vector that we reduced for everyone (0 for client-mode peers). */
  readonly partsReduced: number
  /** Parts of our tensors left unaveraged this round. */
  readonly partsKeptLocal: number
  /** Parts of failed reducers' spans the survivors averaged among themselves after the round (agent/allreduce/repair.ts). */
  readonly repairedParts: number
  /** Channels we opened to reducers this round, by the path that carried them. */
  readonly channels: Readonly<Record<DataChannelKind, number>>
  /** Reducers we sent to over a channel kept from an earlier round (not counted in channels). */
  readonly reusedChannels: number
}

export type Deadline = 'adaptive' | 'fixed'

/**
 * One butterfly all-reduce inside an assembled group: we send each reducer our values on its
 * span and get the weighted mean back (sender-side.ts), while we reduce our own span for everyone
 * (reducer-side.ts). Every wait is bounded; a failed peer costs only its own span or contribution,
 * never the round.
 */
export class AllReduceRunner {
  private readonly ctx: RoundContext
  private readonly reducing: ReducerSide
  private readonly sending: SenderSide
  private leaving = false

  constructor (private readonly options: AllReduceOptions) {
    this.ctx = new RoundContext(options)
    this.sending = new SenderSide(this.ctx, { absentSender: (r, why) => { this.reducing.leaveOutAbsentSender(r, why) } })
    this.reducing = new ReducerSide(this.ctx, {
      senderSilent: (m, noSlack) => { this.sending.senderSilent(m, noSlack) },
      ownMeanDelivered: () => { this.sending.ownMeanDelivered() }
    })
  }

  get plan (): AllReducePlan { return this.ctx.plan }
  /** Bytes of parts received so far this round: the averager samples it to measure our link's rate. */
  get receivedBytes (): number { return this.ctx.bytesReceived }
  /** handOff was called: we are leaving, and this round's repair, if any, is the others'. */
  get left (): boolean { return this.leaving }
  /** Parts of our span reduced so far, and how many it has. */
  get spanProgress (): { reduced: number, span: number } { return this.reducing.progress }

  async run (): Promise<AllReduceResult> {
    const { ctx } = this
    const timer = setTimeout(() => { this.expire() }, this.options.timeoutMs)
    try {
      await Promise.all([...this.reducing.start(), ...this.sending.start()])
      // A leaving reducer's last frames (handOff) are out before the round returns and the agent leaves.
      await this.reducing.end()
      this.options.log?.debug(`all-reduce timeline (ms; peers by group index): ${ctx.timeline.toString()}, end`)
    } finally {
      clearTimeout(timer)
      this.reducing.stop()
      this.sending.stop()
    }
    return {
      groupSize: this.options.group.peerIds.length,
      durationMs: Date.now() - ctx.started,
      bytesSent: ctx.bytesSent,
      bytesReceived: ctx.bytesReceived,
      ...this.sending.outcome,
      ...this.reducing.outcome,
      partsTotal: ctx.mySlot >= 0 ? ctx.plan.parts.length : 0,
      partsReduced: ctx.spanParts.length,
      partsKeptLocal: ctx.partsKeptLocal,
      repairedParts: 0
    }
  }

  /**
   * An inbound aggregate stream from a group member (the router checked the group id). Resolves
   * true when the round went through whole on a kept channel (keptAggregateProtocol), which then
   * carries the sender's next round; otherwise the channel is closed or aborted here.
   */
  async acceptSender (framed: FrameChannel, from: string): Promise<boolean> {
    return await this.reducing.acceptSender(framed, from)
  }

  /**
   * We are leaving before the round ends (a preemption notice shorter than the round). Our span
   * stops at the parts already reduced, whose means are queued to every sender first; then each
   * sender learns where it stopped (TensorPart.handed_off), and the group averages the rest among
   * themselves (repair.ts) instead of keeping it local, as it must when a reducer dies mid-span.
   * Our own parts stop too: our channels to the other reducers are torn down, so they leave us out
   * of what we had not sent at once, not at a deadline. Returns the parts of our span reduced and
   * its length, or null when we reduce nothing or had finished our span (nothing to hand off).
   */
  handOff (why: string): { reduced: number, span: number } | null {
    this.leaving = true
    const handed = this.reducing.handOff()
    if (!this.ctx.abort.signal.aborted) this.ctx.abort.abort(new AveragingError(`we are leaving: ${why}`))
    return handed
  }

  private expire (): void {
    this.options.log?.warn(`${this.options.timeoutMs} ms passed, finishing with what arrived`)
    this.ctx.abort.abort(new TimeoutError('all-reduce timed out'))
    this.reducing.expire()
  }
}
