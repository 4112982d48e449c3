import { payloadBytes, type DataChannelKind, type FrameChannel } from '../net/frame-channel.js'
import { AggregateHeader, AggregateReply, MatchCode } from '../proto/averaging.js'
import { decodeInto, type Codec } from '../compression/index.js'
import type { GroupInfo } from '../matchmaking/group-info.js'
import { AveragingError, ProtocolError, TimeoutError, describeError } from '../errors.js'
import { makePlan, partView, type AllReducePlan } from './plan.js'
import { SpanReducer, type PartResult } from './span-reducer.js'
import { Timeline } from './timeline.js'
import { SenderDeadlines, type CutOff } from './sender-deadlines.js'
import { ReducerDeadlines, type ReducerCutOff } from './reducer-deadlines.js'
import { createReduceKernels, type KernelBackend, type ReduceKernels } from '../kernels/reduce-kernels.js'
import { decodeTensorPartPieces, encodeTensorPartPieces } from './tensor-part-pieces.js'
import { COMPRESSION_WIRE, isKeptChannel, maxPartFrameBytes, PART_WINDOW } from './aggregate-protocol.js'
import type { AggregateDialer } from './aggregate-dialer.js'
import type { Part } from './partition.js'
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

/** How far our exchange with one reducer got: accepted or refused, means received, handed off (it left mid-span and said where). */
interface ExchangeProgress { accepted: boolean, refused: boolean, received: number, handedOff: boolean }

interface SenderLink {
  framed: FrameChannel
  pendingWrites: number
  chain: Promise<void>
  /** The round went through whole and the kept channel went back to the router for the sender's next round: not ours to abort. */
  released: boolean
}

/**
 * One butterfly all-reduce inside an assembled group: we send each reducer our values on its
 * span and get the weighted mean back, while we reduce our own span for everyone. Every wait is
 * bounded; a failed peer costs only its own span or contribution, never the round.
 */
export class AllReduceRunner {
  readonly plan: AllReducePlan
  private readonly me: number
  private readonly mySlot: number
  private readonly reducer: SpanReducer | null
  private readonly spanParts: readonly Part[]
  private readonly links = new Map<number, SenderLink>()
  private readonly failedReducers = new Set<string>()
  private readonly unansweredReducers = new Set<string>()
  private readonly handedOffReducers = new Map<string, number>()
  /** Parts of our span reduced when we handed the rest off (handOff), and the hand-off frames' writes. */
  private handedOffAt: number | undefined
  private handingOff: Promise<unknown> = Promise.resolve()
  private leaving = false
  private readonly bannedSenders = new Set<string>()
  private readonly cutOff: Record<Deadline, string[]> = { adaptive: [], fixed: [] }
  private readonly cutOffReducers: Record<Deadline, string[]> = { adaptive: [], fixed: [] }
  private readonly deadlines: SenderDeadlines | null
  /** How long we wait for each reducer's means (null when we send nothing). */
  private readonly reducerDeadlines: ReducerDeadlines | null
  /** The channel to each reducer we send to, by group index: a late one is aborted. */
  private readonly reducerChannels = new Map<number, FrameChannel>()
  /** Reducers cut off by the adaptive deadline, by group index, with why. */
  private readonly reducersCutOff = new Map<number, ProtocolError>()
  /**
   * Aborts the opening of each reducer's channel: a cut-off reducer whose channel is still being
   * opened (a TLS handshake or a libp2p dial to a process stopped with SIGSTOP answers nothing) is
   * given up on at the cut-off, not at the dial's own timeout.
   */
  private readonly openings = new Map<number, AbortController>()
  private readonly abort = new AbortController()
  private readonly started = Date.now()
  /** Milestones of this round, for the debug log (who was late, where the tail went). */
  private readonly timeline = new Timeline()
  private bytesSent = 0
  private bytesReceived = 0
  /** Liveness checks waiting for bytes from each member (group index), in either role (checkAlive). */
  private readonly awaitingBytes = new Map<number, Array<() => void>>()
  /** Bytes of parts received so far this round: the averager samples it to measure our link's rate. */
  get receivedBytes (): number { return this.bytesReceived }
  /** handOff was called: we are leaving, and this round's repair, if any, is the others'. */
  get left (): boolean { return this.leaving }
  /** Parts of our span reduced so far, and how many it has. */
  get spanProgress (): { reduced: number, span: number } {
    return { reduced: this.reducer?.completedParts ?? 0, span: this.spanParts.length }
  }
  private partsKeptLocal = 0
  private readonly channels = { direct: 0, libp2p: 0 }
  private reusedChannels = 0
  /** Checks and sums; every part is decoded into its staging buffer, then checked and consumed before the next await. */
  private readonly kernels: ReduceKernels
  private reducerDone!: () => void
  private readonly reducerFinished: Promise<void>

  constructor (private readonly options: AllReduceOptions) {
    const { group } = options
    this.plan = makePlan(group.infos, options.tensors.map(t => t.length), options.partSizeBytes, options.codec)
    this.me = group.myIndex
    this.mySlot = this.plan.senders.indexOf(this.me)
    this.spanParts = this.plan.parts.slice(this.plan.spanStart[this.me], this.plan.spanEnd[this.me])
    this.reducerFinished = new Promise(resolve => { this.reducerDone = resolve })
    this.kernels = createReduceKernels(this.spanParts.length > 0 ? PART_WINDOW : 0, Math.max(1, this.plan.maxPartElements), options.kernels)
    if (this.spanParts.length > 0) {
      this.reducer = new SpanReducer(this.spanParts, this.plan.senders.map(i => this.plan.weights[i]), this.kernels, PART_WINDOW, (r) => { this.onPartDone(r) })
      this.deadlines = new SenderDeadlines({
        reducer: this.reducer,
        mySlot: this.mySlot,
        floorMs: options.deadlineSlackMs,
        capMs: options.senderTimeoutMs,
        onCutOff: (c) => { this.cutOffAdaptively(c) },
        ...(options.alive !== undefined ? { checks: { probe: async (slot: number) => await this.checkAlive(this.plan.senders[slot], 'sender'), probeMs: this.aliveCheckMs } } : {})
      }, this.plan.senders.length)
    } else {
      this.reducer = null
      this.deadlines = null
      this.reducerDone()
    }
    this.reducerDeadlines = this.mySlot < 0
      ? null
      : new ReducerDeadlines({
        spanParts: group.peerIds.map((_, r) => this.plan.spanEnd[r] - this.plan.spanStart[r]),
        me: this.me,
        floorMs: options.deadlineSlackMs,
        capMs: options.reducerTimeoutMs,
        onCutOff: (c) => { this.cutOffReducerAdaptively(c) },
        ...(options.alive !== undefined ? { checks: { probe: async (r: number) => await this.checkAlive(r, 'reducer'), probeMs: this.aliveCheckMs } } : {})
      })
  }

  get maxFrameBytes (): number {
    return maxPartFrameBytes(this.options.codec.encodedLength(this.plan.maxPartElements))
  }

  async run (): Promise<AllReduceResult> {
    const timer = setTimeout(() => { this.expire() }, this.options.timeoutMs)
    try {
      const tasks: Array<Promise<void>> = [this.reducerFinished]
      if (this.reducer != null) {
        tasks.push(this.contributeLocally())
        const noShow = setTimeout(() => { this.banAbsentSenders() }, this.options.senderTimeoutMs)
        void this.reducerFinished.then(() => { clearTimeout(noShow); this.deadlines?.stop() })
      }
      if (this.mySlot >= 0) {
        for (let r = 0; r < this.options.group.peerIds.length; r++) {
          if (r !== this.me && this.plan.spanEnd[r] > this.plan.spanStart[r]) tasks.push(this.sendTo(r))
        }
      }
      await Promise.all(tasks)
      // A leaving reducer's last frames (handOff) are out before the round returns and the agent leaves.
      await this.handingOff
      this.options.log?.debug(`all-reduce timeline (ms; peers by group index): ${this.timeline.toString()}, end`)
    } finally {
      clearTimeout(timer)
      this.deadlines?.stop()
      this.reducerDeadlines?.stop()
    }
    return {
      groupSize: this.options.group.peerIds.length,
      durationMs: Date.now() - this.started,
      bytesSent: this.bytesSent,
      bytesReceived: this.bytesReceived,
      failedReducers: [...this.failedReducers],
      unansweredReducers: [...this.unansweredReducers],
      handedOffReducers: Object.fromEntries(this.handedOffReducers),
      bannedSenders: [...this.bannedSenders],
      cutOffSenders: { adaptive: [...this.cutOff.adaptive], fixed: [...this.cutOff.fixed] },
      cutOffReducers: { adaptive: [...this.cutOffReducers.adaptive], fixed: [...this.cutOffReducers.fixed] },
      partsTotal: this.mySlot >= 0 ? this.plan.parts.length : 0,
      partsReduced: this.spanParts.length,
      partsKeptLocal: this.partsKeptLocal,
      repairedParts: 0,
      channels: { ...this.channels },
      reusedChannels: this.reusedChannels
    }
  }

  // ---------------------------------------------------------------- reducer side

  /**
   * An inbound aggregate stream from a group member (the router checked the group id). Resolves
   * true when the round went through whole on a kept channel (keptAggregateProtocol), which then
   * carries the sender's next round; otherwise the channel is closed or aborted here.
   */
  async acceptSender (framed: FrameChannel, from: string): Promise<boolean> {
    const peerIndex = this.options.group.peerIds.indexOf(from)
    const slot = this.plan.senders.indexOf(peerIndex)
    const reducer = this.reducer
    if (this.handedOffAt !== undefined && slot >= 0) {
      // It missed the means the others got before the hand-off: for it, our span answered nothing.
      await framed.write(AggregateReply.encode({ code: MatchCode.NOT_LOOKING_FOR_GROUP, reason: 'this member is leaving and handed its span off' }))
      await framed.closeWrite()
      return false
    }
    if (reducer == null || slot < 0 || slot === this.mySlot || this.links.has(slot) || reducer.isBanned(slot)) {
      const reason = reducer == null ? 'this peer reduces no span' : slot < 0 ? 'not a sender of this group' : 'duplicate or late stream'
      await framed.write(AggregateReply.encode({ code: MatchCode.PROTOCOL_VIOLATION, reason }))
      await framed.closeWrite()
      return false
    }
    const link: SenderLink = { framed, pendingWrites: 0, chain: Promise.resolve(), released: false }
    this.links.set(slot, link)
    try {
      await framed.write(AggregateReply.encode({ code: MatchCode.ACCEPTED, reason: '' }))
      const base = this.plan.spanStart[this.me]
      const wire = COMPRESSION_WIRE[this.options.codec.name]
      for (let k = 0; k < this.spanParts.length; k++) {
        await reducer.waitUntilWithin(k, PART_WINDOW)
        // Means owed to this sender back up when its link is slow: stop reading its parts until
        // they drain, so flow control reaches it instead of our memory growing.
        while (link.pendingWrites > PART_WINDOW && !reducer.isBanned(slot)) await link.chain
        if (reducer.isBanned(slot)) return false
        if (this.handedOffAt !== undefined) break
        this.deadlines?.reading(slot, k)
        const bytes = await framed.readPieces(this.options.senderTimeoutMs)
        if (this.handedOffAt !== undefined) break
        if (bytes == null) throw new ProtocolError(`sender ${from} stopped after ${k} of ${this.spanParts.length} parts`)
        this.bytesReceived += bytes.byteLength
        this.heardFrom(peerIndex)
        const part = decodeTensorPartPieces(bytes)
        const expected = this.spanParts[k]
        if (part.partIndex !== base + k) throw new ProtocolError(`sender ${from} sent part ${part.partIndex} where ${base + k} was due`)
        if (part.compression !== wire) throw new ProtocolError(`sender ${from} used ${part.compression} compression`)
        // Decoded into the kernels' staging buffer: contribute() checks and adds it before anything else runs.
        decodeInto(this.options.codec, part.data, expected.length, this.kernels.staging)
        framed.release?.(bytes)
        if (!reducer.contribute(slot, k, true)) throw new ProtocolError(`sender ${from} sent NaN or infinite values`)
        if (k === 0 || k === this.spanParts.length - 1) this.timeline.mark(`${k === 0 ? 'first' : 'last'} part from ${this.plan.senders[slot]}`)
        this.deadlines?.arrived(slot, k)
      }
      await this.reducerFinished
      await link.chain
      // Every mean written (a failed write banned the sender and aborted the channel).
      if (reducer.isBanned(slot) || this.handedOffAt !== undefined) return false
      if (isKeptChannel(framed)) {
        link.released = true
        return true
      }
      await framed.closeWrite()
      return false
    } catch (err) {
      // Handed off, the sender closes the channel once it has read where we stopped: its last frames are ours to drop.
      if (this.handedOffAt !== undefined) {
        await link.chain
        return false
      }
      // A read past the sender timeout is the fixed deadline; any other error is no deadline at all.
      this.banSender(slot, describeError(err), err instanceof TimeoutError ? 'fixed' : undefined)
      return false
    }
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
    const reducer = this.reducer
    let handed: { reduced: number, span: number } | null = null
    if (this.handedOffAt === undefined && reducer != null && !reducer.done && !this.abort.signal.aborted) {
      const reduced = reducer.stop()
      this.handedOffAt = reduced
      const frame = encodeTensorPartPieces({
        partIndex: this.plan.spanStart[this.me] + reduced,
        compression: COMPRESSION_WIRE[this.options.codec.name],
        data: new Uint8Array(0),
        handedOff: true
      })
      const writes: Array<Promise<void>> = []
      for (const [slot, link] of this.links) {
        if (reducer.isBanned(slot) || link.released) continue
        link.chain = link.chain.then(async () => {
          await link.framed.write(frame)
          await link.framed.closeWrite()
        }).catch(() => {})
        writes.push(link.chain)
      }
      this.handingOff = Promise.all(writes)
      handed = { reduced, span: this.spanParts.length }
      this.timeline.mark(`handed off after ${reduced} parts`)
      this.reducerDone()
    }
    if (!this.abort.signal.aborted) this.abort.abort(new AveragingError(`we are leaving: ${why}`))
    return handed
  }

  private async contributeLocally (): Promise<void> {
    const reducer = this.reducer
    if (reducer == null || this.mySlot < 0) return
    for (let k = 0; k < this.spanParts.length; k++) {
      await reducer.waitUntilWithin(k, PART_WINDOW)
      if (reducer.isBanned(this.mySlot) || this.handedOffAt !== undefined) return
      const values = partView(this.options.tensors, this.plan, this.spanParts[k])
      this.kernels.staging.set(values)
      // Our own values are not checked here: a NaN of ours makes the part's mean NaN, which
      // onPartDone keeps out of everyone's tensors.
      reducer.contribute(this.mySlot, k, false)
      this.deadlines?.update()
    }
  }

  private onPartDone (result: PartResult): void {
    // A mean can still leave float32's range (huge finite values and weights): it is never applied or sent.
    if (result.overflowed) this.options.log?.warn(`the mean of part ${this.plan.spanStart[this.me] + result.partIndex} is not finite; every member keeps its own values there`)
    const part = this.spanParts[result.partIndex]
    const partIndex = this.plan.spanStart[this.me] + result.partIndex
    if (this.mySlot >= 0) {
      if (result.mean != null) this.applyMean(part, result.mean)
      else this.partsKeptLocal++
      this.reducerDeadlines?.delivered(this.me)
    }
    // The mean is this part's own array and the codec's output is new or a view of it: the pieces
    // stay unchanged while the writes below are queued.
    const frame = encodeTensorPartPieces({
      partIndex,
      compression: COMPRESSION_WIRE[this.options.codec.name],
      data: result.mean != null ? this.options.codec.encode(result.mean) : new Uint8Array(0)
    })
    const frameBytes = payloadBytes(frame)
    for (const [slot, link] of this.links) {
      if (this.reducer!.isBanned(slot) && this.reducer!.nextPartOf(slot) <= result.partIndex) continue
      link.pendingWrites++
      link.chain = link.chain.then(async () => {
        await link.framed.write(frame)
        this.bytesSent += frameBytes
      }).catch((err) => { this.banSender(slot, describeError(err)) }).finally(() => { link.pendingWrites-- })
    }
    if (this.reducer!.done) {
      this.timeline.mark('span reduced')
      this.reducerDone()
    }
  }

  /** Leaves a sender out of the rest of our span; `deadline` says which deadline, if any, it missed. */
  private banSender (slot: number, reason: string, deadline?: Deadline): void {
    const peer = this.options.group.peerIds[this.plan.senders[slot]]
    if (this.reducer != null && !this.reducer.isBanned(slot)) {
      this.bannedSenders.add(peer)
      if (deadline !== undefined) this.cutOff[deadline].push(peer)
      this.options.log?.warn(`leaving sender ${peer} out of the rest of our span: ${reason}`)
      this.reducer.ban(slot)
      this.deadlines?.update()
      // Silent past a deadline as a sender: as a reducer it gets no second slack (ReducerDeadlines.silent),
      // and none at all when it did not answer a liveness check either (the adaptive deadline with
      // checks cuts off no other sender) or sent nothing for the whole fixed sender timeout.
      if (deadline !== undefined && !this.abort.signal.aborted) this.reducerDeadlines?.silent(this.plan.senders[slot], deadline === 'fixed' || this.options.alive !== undefined)
    }
    const link = this.links.get(slot)
    if (link != null && !link.released) link.framed.abort(new ProtocolError(reason))
  }

  /**
   * Member r told us, as a reducer, that it runs no such round or that it is leaving: as a sender it
   * is left out now, not at a deadline (unless it did connect to us: then its stream says when it stops).
   */
  private leaveOutAbsentSender (r: number, why: string): void {
    const slot = this.plan.senders.indexOf(r)
    if (this.reducer == null || slot < 0 || slot === this.mySlot || this.links.has(slot)) return
    this.banSender(slot, why)
  }

  private banAbsentSenders (): void {
    for (let slot = 0; slot < this.plan.senders.length; slot++) {
      if (slot !== this.mySlot && !this.links.has(slot)) this.banSender(slot, 'sender never connected', 'fixed')
    }
  }

  /** Exactly what a sender timeout does, only sooner: the part it owes goes on without it. */
  private cutOffAdaptively ({ slot, part, waitedMs, wait, samples, checkUnanswered }: CutOff): void {
    const what = this.links.has(slot) ? `sent no part ${this.plan.spanStart[this.me] + part}` : 'never connected'
    const ms = (x: number): number => Math.round(x)
    const when = checkUnanswered ? `and did not answer a liveness check within ${ms(this.aliveCheckMs)} ms` : 'within the adaptive deadline'
    this.banSender(slot, `${what} ${when}: waited ${ms(waitedMs)} ms, limit ${ms(wait.limitMs)} ms ` +
      `(median ${ms(wait.medianMs)} ms, MAD ${ms(wait.madMs)} ms of the waits of ${samples} sender(s) that delivered it)`, 'adaptive')
  }

  // ---------------------------------------------------------------- sender side

  /** Exactly what a reducer timeout does, only sooner: the rest of its span stays local. */
  private cutOffReducerAdaptively ({ reducer, part, waitedMs, wait, samples, silentSender, unaccepted, unanswered, checkUnanswered }: ReducerCutOff): void {
    const peer = this.options.group.peerIds[reducer]
    const ms = (x: number): number => Math.round(x)
    const when = checkUnanswered ? `and did not answer a liveness check within ${ms(this.aliveCheckMs)} ms` : 'within the adaptive deadline'
    const why = new ProtocolError(unanswered
      ? `reducer ${peer} owes us ${unaccepted ? 'its acceptance of our stream' : `the mean of part ${this.plan.spanStart[reducer] + part}`}, and as a sender it was silent and did not answer a liveness check: not waited for`
      : unaccepted
      ? `reducer ${peer} did not accept our stream ${when}: waited ${ms(waitedMs)} ms, limit ${ms(wait.limitMs)} ms ` +
        `(median ${ms(wait.medianMs)} ms, MAD ${ms(wait.madMs)} ms of the times ${samples} reducer(s) took to accept)`
      : silentSender
      ? `reducer ${peer} sent no mean of part ${this.plan.spanStart[reducer] + part} by the time ${samples} reducer(s) had (waited ${ms(waitedMs)} ms), ` +
        'and we had cut it off as a sender for silence within the adaptive deadline'
      : `reducer ${peer} sent no mean of part ${this.plan.spanStart[reducer] + part} ${when}: ` +
        `waited ${ms(waitedMs)} ms, limit ${ms(wait.limitMs)} ms (median ${ms(wait.medianMs)} ms, MAD ${ms(wait.madMs)} ms of the waits of ${samples} reducer(s) that answered it)`)
    this.cutOffReducers.adaptive.push(peer)
    this.reducersCutOff.set(reducer, why)
    this.openings.get(reducer)?.abort(why)
    this.reducerChannels.get(reducer)?.abort(why)
  }

  private get aliveCheckMs (): number { return this.options.aliveCheckMs ?? this.options.deadlineSlackMs / 2 }

  /** A frame from member m arrived: the liveness checks waiting on it have their answer. */
  private heardFrom (m: number): void {
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
  private async checkAlive (m: number, role: 'sender' | 'reducer'): Promise<boolean | 'unknown'> {
    const peer = this.options.group.peerIds[m]
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

  private async sendTo (r: number): Promise<void> {
    const peer = this.options.group.peerIds[r]
    const start = this.plan.spanStart[r]
    const end = this.plan.spanEnd[r]
    const progress: ExchangeProgress = { accepted: false, refused: false, received: 0, handedOff: false }
    const opening = new AbortController()
    this.openings.set(r, opening)
    const channelOptions = {
      timeoutMs: this.options.reducerTimeoutMs,
      maxFrameBytes: this.maxFrameBytes,
      maxQueuedFrames: PART_WINDOW,
      signal: AbortSignal.any([opening.signal, this.abort.signal])
    }
    let framed: FrameChannel | null = null
    try {
      framed = this.options.dialer.takeKept(peer, this.options.group.infos[r])
      const reused = framed != null
      framed ??= await this.options.dialer.open(peer, this.options.group.infos[r], channelOptions)
      this.timeline.mark(`channel to ${r} ${reused ? 'reused' : 'open'}`)
      try {
        await this.exchangeWith(r, framed, progress, reused)
      } catch (err) {
        // A direct channel that broke before the reducer accepted it carried nothing: once more,
        // on a new direct channel where it was a kept one (the reducer closed it while idle, or
        // restarted), else over libp2p (the reducer gave up on a TLS handshake slowed by load
        // after our side had finished it). Not after a refusal: the reducer answered, and a new
        // channel gets the same answer later (a member that left our group refused only after its
        // router's wait for the group, and a second channel doubled that: 2.5 → 5 s in chaos runs).
        if (framed.kind !== 'direct' || progress.accepted || progress.refused || this.abort.signal.aborted || this.reducersCutOff.has(r)) throw err
        this.options.log?.debug(`the ${reused ? 'kept' : 'direct'} channel to ${peer} closed before the reducer accepted it (${describeError(err)}); ${reused ? 'opening a new one' : 'sending over libp2p'}`)
        framed.abort(asError(err))
        framed = reused
          ? await this.options.dialer.open(peer, this.options.group.infos[r], channelOptions)
          : await this.options.dialer.openOverLibp2p(peer, channelOptions)
        await this.exchangeWith(r, framed, progress, false)
      }
    } catch (caught) {
      // An opening given up on fails with why: the adaptive cut-off, or the all-reduce timeout.
      const err = this.reducersCutOff.get(r) ?? (this.abort.signal.aborted ? asError(this.abort.signal.reason) : caught)
      this.reducerDeadlines?.failed(r)
      // A read past the reducer timeout, or the all-reduce's, is the fixed deadline (the adaptive one recorded itself).
      if (err instanceof TimeoutError && !this.reducersCutOff.has(r)) this.cutOffReducers.fixed.push(peer)
      this.failedReducers.add(peer)
      if (progress.received === 0) this.unansweredReducers.add(peer)
      if (progress.handedOff) this.handedOffReducers.set(peer, progress.received)
      this.partsKeptLocal += (end - start) - progress.received
      this.options.log?.warn(`keeping ${end - start - progress.received} parts of reducer ${peer}'s span local: ${describeError(err)}`)
      framed?.abort(err instanceof Error ? err : new ProtocolError(describeError(err)))
    }
  }

  /** Our parts of reducer r's span out, its means back in; progress says how far it got. */
  private async exchangeWith (r: number, framed: FrameChannel, progress: ExchangeProgress, reused: boolean): Promise<void> {
    const peer = this.options.group.peerIds[r]
    const start = this.plan.spanStart[r]
    const end = this.plan.spanEnd[r]
    if (reused) this.reusedChannels++
    else this.channels[framed.kind]++
    this.reducerChannels.set(r, framed)
    const cut = this.reducersCutOff.get(r)
    if (cut !== undefined) throw cut
    const onAbort = (): void => { framed.abort(new TimeoutError('all-reduce timed out')) }
    this.abort.signal.addEventListener('abort', onAbort, { once: true })
    await framed.write(AggregateHeader.encode({ groupId: this.options.group.groupId as Uint8Array<ArrayBuffer>, repairOf: (this.options.repairOf ?? new Uint8Array(0)) as Uint8Array<ArrayBuffer> }))
    const writing = this.writeParts(framed, start, end).then(() => { this.timeline.mark(`last part to ${r} written`) })
    writing.catch(() => {})
    const first = await framed.read(this.options.reducerTimeoutMs)
    if (first == null) throw new ProtocolError(`reducer ${peer} closed the stream before answering`)
    const reply = AggregateReply.decode(first)
    if (reply.code !== MatchCode.ACCEPTED) {
      progress.refused = true
      // A member that runs no such round (it left it, or runs no repair of it) sends us nothing either.
      if (reply.code === MatchCode.NOT_LOOKING_FOR_GROUP) this.leaveOutAbsentSender(r, `it answered that it runs no such round (${reply.reason})`)
      throw new ProtocolError(`reducer ${peer} refused: ${reply.code} ${reply.reason}`)
    }
    progress.accepted = true
    this.timeline.mark(`accepted by ${r}`)
    this.reducerDeadlines?.accepted(r)
    const wire = COMPRESSION_WIRE[this.options.codec.name]
    for (let index = start; index < end; index++) {
      const bytes = await framed.readPieces(this.options.reducerTimeoutMs)
      if (bytes == null) throw new ProtocolError(`reducer ${peer} stopped after ${index - start} of ${end - start} parts`)
      this.bytesReceived += bytes.byteLength
      this.heardFrom(r)
      const result = decodeTensorPartPieces(bytes)
      if (result.partIndex !== index) throw new ProtocolError(`reducer ${peer} answered part ${result.partIndex} where ${index} was due`)
      if (result.handedOff) {
        progress.handedOff = true
        // It stopped sending too: had it not reached us yet, it never will (seen under load: a wait of the sender timeout).
        this.leaveOutAbsentSender(r, 'it is leaving: it handed its span off before it sent us anything')
        throw new AveragingError(`reducer ${peer} is leaving: it answered ${index - start} of the ${end - start} parts of its span and handed the rest to the group`)
      }
      progress.received++
      this.reducerDeadlines?.delivered(r)
      if (index === start || index === end - 1) this.timeline.mark(`${index === start ? 'first' : 'last'} mean from ${r}`)
      if (result.data.byteLength === 0) { this.partsKeptLocal++; continue }
      if (result.compression !== wire) throw new ProtocolError(`reducer ${peer} used ${result.compression} compression`)
      const part = this.plan.parts[index]
      const mean = decodeInto(this.options.codec, result.data, part.length, this.kernels.staging)
      framed.release?.(bytes)
      if (!this.kernels.allFinite(part.length)) throw new ProtocolError(`reducer ${peer} sent NaN or infinite values`)
      this.applyMean(part, mean)
    }
    await writing
    // Every part out and every mean back: the channel is free for the next round to this reducer.
    this.abort.signal.removeEventListener('abort', onAbort)
    this.reducerChannels.delete(r)
    if (!this.options.dialer.keep(peer, this.options.group.infos[r], framed)) await framed.closeWrite()
  }

  private async writeParts (framed: FrameChannel, start: number, end: number): Promise<void> {
    const wire = COMPRESSION_WIRE[this.options.codec.name]
    for (let index = start; index < end; index++) {
      const part = this.plan.parts[index]
      // A view of our tensors for the 'none' codec: they change only when this part's mean comes
      // back, which the reducer sends after it has read the whole part.
      const frame = encodeTensorPartPieces({
        partIndex: index,
        compression: wire,
        data: this.options.codec.encode(partView(this.options.tensors, this.plan, part))
      })
      await framed.write(frame)
      this.bytesSent += payloadBytes(frame)
    }
  }

  private applyMean (part: Part, mean: Float32Array): void {
    const local = partView(this.options.tensors, this.plan, part)
    const alpha = this.options.alpha
    if (alpha === 1) local.set(mean)
    else for (let i = 0; i < local.length; i++) local[i] += alpha * (mean[i] - local[i])
  }

  private expire (): void {
    this.options.log?.warn(`${this.options.timeoutMs} ms passed, finishing with what arrived`)
    this.abort.abort(new TimeoutError('all-reduce timed out'))
    const reducer = this.reducer
    if (reducer != null) {
      // Senders still owing parts are left out of the rest of the span, and reported as such:
      // a mean of whoever arrived in time is a partial round, not a success.
      for (let slot = 0; slot < this.plan.senders.length; slot++) {
        if (slot !== this.mySlot && reducer.nextPartOf(slot) < this.spanParts.length) this.banSender(slot, 'the all-reduce timed out before it sent every part', 'fixed')
      }
      reducer.banAll()
    }
    for (const link of this.links.values()) if (!link.released) link.framed.abort(new TimeoutError('all-reduce timed out'))
    this.reducerDone()
  }
}

function asError (reason: unknown): Error {
  return reason instanceof Error ? reason : new ProtocolError(describeError(reason))
}
