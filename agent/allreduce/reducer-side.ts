import { payloadBytes, type FrameChannel } from '../net/frame-channel.js'
import { AggregateReply, MatchCode } from '../proto/averaging.js'
import { decodeInto } from '../compression/index.js'
import { ProtocolError, TimeoutError, describeError } from '../errors.js'
import { SpanReducer, type PartResult } from './span-reducer.js'
import { SenderDeadlines, type CutOff } from './sender-deadlines.js'
import { decodeTensorPartPieces, encodeTensorPartPieces } from './tensor-part-pieces.js'
import { encodeForWire, returnWhenFlushed } from './wire-encoding.js'
import { returnWireMemory } from '../net/wire-memory.js'
import { COMPRESSION_WIRE, isKeptChannel, PART_WINDOW } from './aggregate-protocol.js'
import type { RoundContext } from './round-context.js'
import type { Deadline } from './runner.js'

interface SenderLink {
  framed: FrameChannel
  pendingWrites: number
  chain: Promise<void>
  /** The round went through whole and the kept channel went back to the router for the sender's next round: not ours to abort. */
  released: boolean
}

/** What the reducer side tells the sender side of the same round (runner.ts wires them). */
export interface ReducerSideHooks {
  /**
   * Member m, left out as a sender past a deadline: as a reducer it gets no second slack, and none
   * at all when noSlack (ReducerDeadlines.silent).
   */
  readonly senderSilent: (m: number, noSlack: boolean) => void
  /** The mean of a part of our own span reached our tensors: as its sender, we heard from its reducer (us). */
  readonly ownMeanDelivered: () => void
}

/**
 * Our half of the butterfly as a reducer: every sender's parts of our span in, the weighted mean of
 * each part back to all of them (and into our own tensors). A sender that fails, is late past a
 * deadline or sends bad data is left out of the rest of the span; the others go on without it.
 */
export class ReducerSide {
  private readonly reducer: SpanReducer | null
  /** How long we wait for each sender's next part (null when we reduce nothing). */
  private readonly deadlines: SenderDeadlines | null
  private readonly links = new Map<number, SenderLink>()
  private readonly banned = new Set<string>()
  private readonly cutOff: Record<Deadline, string[]> = { adaptive: [], fixed: [] }
  /** Parts of our span reduced when we handed the rest off (handOff). */
  private handedOffAt: number | undefined
  /** The hand-off frames' writes: out before the round returns and the agent leaves. */
  private handingOff: Promise<unknown> = Promise.resolve()
  private done!: () => void
  /** Our span is reduced and every mean queued to its senders, or it ended early (expire, handOff). */
  readonly finished: Promise<void>

  constructor (private readonly ctx: RoundContext, private readonly hooks: ReducerSideHooks) {
    const { plan, options } = ctx
    this.finished = new Promise(resolve => { this.done = resolve })
    if (ctx.spanParts.length > 0) {
      this.reducer = new SpanReducer(ctx.spanParts, plan.senders.map(i => plan.weights[i]), ctx.kernels, PART_WINDOW, (r) => { this.onPartDone(r) })
      this.deadlines = new SenderDeadlines({
        reducer: this.reducer,
        mySlot: ctx.mySlot,
        floorMs: options.deadlineSlackMs,
        capMs: options.senderTimeoutMs,
        onCutOff: (c) => { this.cutOffAdaptively(c) },
        ...(options.alive !== undefined ? { checks: { probe: async (slot: number) => await ctx.checkAlive(plan.senders[slot], 'sender'), probeMs: ctx.aliveCheckMs } } : {})
      }, plan.senders.length)
    } else {
      this.reducer = null
      this.deadlines = null
      this.done()
    }
  }

  /** Parts of our span reduced so far, and how many it has. */
  get progress (): { reduced: number, span: number } {
    return { reduced: this.reducer?.completedParts ?? 0, span: this.ctx.spanParts.length }
  }

  /** Senders our span was averaged without, and those of them cut off for being late, by deadline. */
  get outcome (): { bannedSenders: string[], cutOffSenders: Record<Deadline, string[]> } {
    return { bannedSenders: [...this.banned], cutOffSenders: { adaptive: [...this.cutOff.adaptive], fixed: [...this.cutOff.fixed] } }
  }

  /** The work of our side until the span is done: our own contribution, and the no-show deadline. */
  start (): Array<Promise<void>> {
    if (this.reducer == null) return [this.finished]
    const noShow = setTimeout(() => { this.banAbsentSenders() }, this.ctx.options.senderTimeoutMs)
    void this.finished.then(() => { clearTimeout(noShow); this.deadlines?.stop() })
    return [this.finished, this.contributeLocally()]
  }

  /** The round returned: no deadline of ours runs on. A hand-off's last frames are out first. */
  async end (): Promise<void> { await this.handingOff }

  stop (): void { this.deadlines?.stop() }

  /**
   * An inbound aggregate stream from a group member (the router checked the group id). Resolves
   * true when the round went through whole on a kept channel (keptAggregateProtocol), which then
   * carries the sender's next round; otherwise the channel is closed or aborted here.
   */
  async acceptSender (framed: FrameChannel, from: string): Promise<boolean> {
    const { ctx } = this
    const peerIndex = ctx.options.group.peerIds.indexOf(from)
    const slot = ctx.plan.senders.indexOf(peerIndex)
    const reducer = this.reducer
    if (this.handedOffAt !== undefined && slot >= 0) {
      // It missed the means the others got before the hand-off: for it, our span answered nothing.
      await framed.write(AggregateReply.encode({ code: MatchCode.NOT_LOOKING_FOR_GROUP, reason: 'this member is leaving and handed its span off' }))
      await framed.closeWrite()
      return false
    }
    if (reducer == null || slot < 0 || slot === ctx.mySlot || this.links.has(slot) || reducer.isBanned(slot)) {
      const reason = reducer == null ? 'this peer reduces no span' : slot < 0 ? 'not a sender of this group' : 'duplicate or late stream'
      await framed.write(AggregateReply.encode({ code: MatchCode.PROTOCOL_VIOLATION, reason }))
      await framed.closeWrite()
      return false
    }
    const link: SenderLink = { framed, pendingWrites: 0, chain: Promise.resolve(), released: false }
    this.links.set(slot, link)
    ctx.channelWith(peerIndex, framed.kind)
    try {
      await framed.write(AggregateReply.encode({ code: MatchCode.ACCEPTED, reason: '' }))
      const base = ctx.plan.spanStart[ctx.me]
      const wire = COMPRESSION_WIRE[ctx.options.codec.name]
      for (let k = 0; k < ctx.spanParts.length; k++) {
        await reducer.waitUntilWithin(k, PART_WINDOW)
        // Means owed to this sender back up when its link is slow: stop reading its parts until
        // they drain, so flow control reaches it instead of our memory growing.
        while (link.pendingWrites > PART_WINDOW && !reducer.isBanned(slot)) await link.chain
        if (reducer.isBanned(slot)) return false
        if (this.handedOffAt !== undefined) break
        this.deadlines?.reading(slot, k)
        const bytes = await framed.readPieces(ctx.options.senderTimeoutMs)
        if (this.handedOffAt !== undefined) break
        if (bytes == null) throw new ProtocolError(`sender ${from} stopped after ${k} of ${ctx.spanParts.length} parts`)
        ctx.heardFrom(peerIndex, bytes.byteLength)
        const part = decodeTensorPartPieces(bytes)
        const expected = ctx.spanParts[k]
        if (part.partIndex !== base + k) throw new ProtocolError(`sender ${from} sent part ${part.partIndex} where ${base + k} was due`)
        if (part.compression !== wire) throw new ProtocolError(`sender ${from} used ${part.compression} compression`)
        // Decoded into the kernels' staging buffer: contribute() checks and adds it before anything else runs.
        decodeInto(ctx.options.codec, part.data, expected.length, ctx.kernels.staging)
        framed.release?.(bytes)
        if (!reducer.contribute(slot, k, true)) throw new ProtocolError(`sender ${from} sent NaN or infinite values`)
        if (k === 0 || k === ctx.spanParts.length - 1) ctx.timeline.mark(`${k === 0 ? 'first' : 'last'} part from ${ctx.plan.senders[slot]}`)
        this.deadlines?.arrived(slot, k)
      }
      await this.finished
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
   * We are leaving before our span is done (AllReduceRunner.handOff): the span stops at the parts
   * already reduced, whose means are queued to every sender first; then each sender learns where it
   * stopped (TensorPart.handed_off). Returns the parts reduced and the span's length, or null when we
   * reduce nothing, had finished our span, or the round is over.
   */
  handOff (): { reduced: number, span: number } | null {
    const { ctx } = this
    const reducer = this.reducer
    if (this.handedOffAt !== undefined || reducer == null || reducer.done || ctx.abort.signal.aborted) return null
    const reduced = reducer.stop()
    this.handedOffAt = reduced
    const frame = encodeTensorPartPieces({
      partIndex: ctx.plan.spanStart[ctx.me] + reduced,
      compression: COMPRESSION_WIRE[ctx.options.codec.name],
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
    ctx.timeline.mark(`handed off after ${reduced} parts`)
    this.done()
    return { reduced, span: ctx.spanParts.length }
  }

  /**
   * Member r told us, as a reducer, that it runs no such round or that it is leaving: as a sender it
   * is left out now, not at a deadline (unless it did connect to us: then its stream says when it stops).
   */
  leaveOutAbsentSender (r: number, why: string): void {
    const slot = this.ctx.plan.senders.indexOf(r)
    if (this.reducer == null || slot < 0 || slot === this.ctx.mySlot || this.links.has(slot)) return
    this.banSender(slot, why)
  }

  /** The all-reduce timed out (the round's abort is already signalled): the span ends with what arrived. */
  expire (): void {
    const { ctx } = this
    const reducer = this.reducer
    if (reducer != null) {
      // Senders still owing parts are left out of the rest of the span, and reported as such:
      // a mean of whoever arrived in time is a partial round, not a success.
      for (let slot = 0; slot < ctx.plan.senders.length; slot++) {
        if (slot !== ctx.mySlot && reducer.nextPartOf(slot) < ctx.spanParts.length) this.banSender(slot, 'the all-reduce timed out before it sent every part', 'fixed')
      }
      reducer.banAll()
    }
    for (const link of this.links.values()) if (!link.released) link.framed.abort(new TimeoutError('all-reduce timed out'))
    this.done()
  }

  private async contributeLocally (): Promise<void> {
    const { ctx } = this
    const reducer = this.reducer
    if (reducer == null || ctx.mySlot < 0) return
    for (let k = 0; k < ctx.spanParts.length; k++) {
      await reducer.waitUntilWithin(k, PART_WINDOW)
      if (reducer.isBanned(ctx.mySlot) || this.handedOffAt !== undefined) return
      // Our values, or in a delta round our change (written into the staging buffer itself).
      const values = ctx.outgoing(ctx.spanParts[k], ctx.kernels.staging)
      if (values.buffer !== ctx.kernels.staging.buffer) ctx.kernels.staging.set(values)
      // Our own values are not checked here: a NaN of ours makes the part's mean NaN, which
      // onPartDone keeps out of everyone's tensors.
      reducer.contribute(ctx.mySlot, k, false)
      this.deadlines?.update()
    }
  }

  private onPartDone (result: PartResult): void {
    const { ctx } = this
    const partIndex = ctx.plan.spanStart[ctx.me] + result.partIndex
    // A mean can still leave float32's range (huge finite values and weights): it is never applied or sent.
    if (result.overflowed) ctx.options.log?.warn(`the mean of part ${partIndex} is not finite; every member keeps its own values there`)
    // The mean is this part's own (lent) memory, and the codec's output a view of it or memory of its
    // own: the pieces stay unchanged while the writes below are queued, and go back once all have flushed.
    const { codec } = ctx.options
    const data = result.mean != null ? encodeForWire(codec, result.mean) : new Uint8Array(0)
    if (ctx.mySlot >= 0) {
      if (result.mean != null) {
        // A lossy codec: we take the mean as the other members decode it, so that the whole group leaves
        // the round with identical tensors (delta rounds rely on it: agent/allreduce/delta-base.ts).
        if (codec.name !== 'none') decodeInto(codec, data, result.mean.length, result.mean)
        ctx.applyMean(ctx.spanParts[result.partIndex], result.mean)
      } else ctx.partsKeptLocal++
      this.hooks.ownMeanDelivered()
    }
    const frame = encodeTensorPartPieces({ partIndex, compression: COMPRESSION_WIRE[ctx.options.codec.name], data })
    const frameBytes = payloadBytes(frame)
    const reducer = this.reducer!
    const links = [...this.links].filter(([slot]) => !(reducer.isBanned(slot) && reducer.nextPartOf(slot) <= result.partIndex))
    // Encoded apart from the mean (float16), the mean's memory is free already (applied above).
    if (result.mean != null && data.buffer !== result.mean.buffer) returnWireMemory(result.mean)
    const flushed = returnWhenFlushed(data, links.length)
    for (const [slot, link] of links) {
      link.pendingWrites++
      link.chain = link.chain.then(async () => {
        await link.framed.write(frame, flushed)
        ctx.bytesSent += frameBytes
      }).catch((err) => { this.banSender(slot, describeError(err)) }).finally(() => { link.pendingWrites-- })
    }
    if (reducer.done) {
      ctx.timeline.mark('span reduced')
      this.done()
    }
  }

  /** Leaves a sender out of the rest of our span; `deadline` says which deadline, if any, it missed. */
  private banSender (slot: number, reason: string, deadline?: Deadline): void {
    const { ctx } = this
    const peer = ctx.peer(ctx.plan.senders[slot])
    if (this.reducer != null && !this.reducer.isBanned(slot)) {
      this.banned.add(peer)
      if (deadline !== undefined) this.cutOff[deadline].push(peer)
      ctx.options.log?.warn(`leaving sender ${peer} out of the rest of our span: ${reason}`)
      this.reducer.ban(slot)
      this.deadlines?.update()
      // Silent past a deadline as a sender: as a reducer it gets no second slack (ReducerDeadlines.silent),
      // and none at all when it did not answer a liveness check either (the adaptive deadline with
      // checks cuts off no other sender) or sent nothing for the whole fixed sender timeout.
      if (deadline !== undefined && !ctx.abort.signal.aborted) this.hooks.senderSilent(ctx.plan.senders[slot], deadline === 'fixed' || ctx.options.alive !== undefined)
    }
    const link = this.links.get(slot)
    if (link != null && !link.released) link.framed.abort(new ProtocolError(reason))
  }

  private banAbsentSenders (): void {
    for (let slot = 0; slot < this.ctx.plan.senders.length; slot++) {
      if (slot !== this.ctx.mySlot && !this.links.has(slot)) this.banSender(slot, 'sender never connected', 'fixed')
    }
  }

  /** Exactly what a sender timeout does, only sooner: the part it owes goes on without it. */
  private cutOffAdaptively ({ slot, part, waitedMs, wait, samples, checkUnanswered }: CutOff): void {
    const { ctx } = this
    const what = this.links.has(slot) ? `sent no part ${ctx.plan.spanStart[ctx.me] + part}` : 'never connected'
    const ms = (x: number): number => Math.round(x)
    const when = checkUnanswered ? `and did not answer a liveness check within ${ms(ctx.lastCheckMs(ctx.plan.senders[slot]))} ms` : 'within the adaptive deadline'
    this.banSender(slot, `${what} ${when}: waited ${ms(waitedMs)} ms, limit ${ms(wait.limitMs)} ms ` +
      `(median ${ms(wait.medianMs)} ms, MAD ${ms(wait.madMs)} ms of the waits of ${samples} sender(s) that delivered it)`, 'adaptive')
  }
}
