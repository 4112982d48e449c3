import { payloadBytes, type DataChannelKind, type FrameChannel } from '../net/frame-channel.js'
import { AggregateHeader, AggregateReply, MatchCode } from '../proto/averaging.js'
import { decodeInto } from '../compression/index.js'
import { AveragingError, ProtocolError, TimeoutError, describeError } from '../errors.js'
import { ReducerDeadlines, type ReducerCutOff } from './reducer-deadlines.js'
import { decodeTensorPartPieces, encodeTensorPartPieces } from './tensor-part-pieces.js'
import { encodeForWire, returnWhenFlushed } from './wire-encoding.js'
import { COMPRESSION_WIRE, maxPartFrameBytes, PART_WINDOW } from './aggregate-protocol.js'
import type { RoundContext } from './round-context.js'
import type { Deadline } from './runner.js'

/** How far our exchange with one reducer got: accepted or refused, means received, handed off (it left mid-span and said where). */
interface ExchangeProgress { accepted: boolean, refused: boolean, received: number, handedOff: boolean }

/** What the sender side tells the reducer side of the same round (runner.ts wires them). */
export interface SenderSideHooks {
  /** Member r told us, as a reducer, that it runs no such round or that it is leaving: as a sender it is left out now. */
  readonly absentSender: (r: number, why: string) => void
}

/** What our exchanges with the reducers came to (AllReduceResult's fields of the same names). */
export interface SenderOutcome {
  failedReducers: string[]
  unansweredReducers: string[]
  handedOffReducers: Record<string, number>
  cutOffReducers: Record<Deadline, string[]>
  channels: Record<DataChannelKind, number>
  reusedChannels: number
}

/**
 * Our half of the butterfly as a sender: our values on each reducer's span out to it, its means
 * back into our tensors. A reducer that fails or is late past a deadline costs only its own span,
 * which stays local (or is repaired after the round, repair.ts).
 */
export class SenderSide {
  private readonly failed = new Set<string>()
  private readonly unanswered = new Set<string>()
  private readonly handedOff = new Map<string, number>()
  private readonly cutOff: Record<Deadline, string[]> = { adaptive: [], fixed: [] }
  /** How long we wait for each reducer's means (null when we send nothing). */
  private readonly deadlines: ReducerDeadlines | null
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
  private readonly channels = { direct: 0, libp2p: 0 }
  private reusedChannels = 0
  /** A delta round's changes of the part being encoded (ctx.outgoing): one part at a time, encoded before any await. */
  private changeBuffer: Float32Array | undefined

  constructor (private readonly ctx: RoundContext, private readonly hooks: SenderSideHooks) {
    const { plan, options } = ctx
    this.deadlines = ctx.mySlot < 0
      ? null
      : new ReducerDeadlines({
        spanParts: options.group.peerIds.map((_, r) => plan.spanEnd[r] - plan.spanStart[r]),
        me: ctx.me,
        floorMs: options.deadlineSlackMs,
        capMs: options.reducerTimeoutMs,
        onCutOff: (c) => { this.cutOffAdaptively(c) },
        ...(options.alive !== undefined ? { checks: { probe: async (r: number) => await ctx.checkAlive(r, 'reducer'), probeMs: ctx.aliveCheckMs } } : {})
      })
  }

  get maxFrameBytes (): number {
    return maxPartFrameBytes(this.ctx.options.codec.encodedLength(this.ctx.plan.maxPartElements))
  }

  get outcome (): SenderOutcome {
    return {
      failedReducers: [...this.failed],
      unansweredReducers: [...this.unanswered],
      handedOffReducers: Object.fromEntries(this.handedOff),
      cutOffReducers: { adaptive: [...this.cutOff.adaptive], fixed: [...this.cutOff.fixed] },
      channels: { ...this.channels },
      reusedChannels: this.reusedChannels
    }
  }

  /** One exchange with every other member that reduces a span (none when we send nothing). */
  start (): Array<Promise<void>> {
    const { ctx } = this
    if (ctx.mySlot < 0) return []
    const tasks: Array<Promise<void>> = []
    for (let r = 0; r < ctx.options.group.peerIds.length; r++) {
      if (r !== ctx.me && ctx.plan.spanEnd[r] > ctx.plan.spanStart[r]) tasks.push(this.sendTo(r))
    }
    return tasks
  }

  stop (): void { this.deadlines?.stop() }

  /** Member m, left out as a sender past a deadline (ReducerDeadlines.silent). */
  senderSilent (m: number, noSlack: boolean): void { this.deadlines?.silent(m, noSlack) }

  /** A mean of our own span reached our tensors: we, as a reducer, delivered to ourselves. */
  ownMeanDelivered (): void { this.deadlines?.delivered(this.ctx.me) }

  private async sendTo (r: number): Promise<void> {
    const { ctx } = this
    const { options } = ctx
    const peer = ctx.peer(r)
    const start = ctx.plan.spanStart[r]
    const end = ctx.plan.spanEnd[r]
    const progress: ExchangeProgress = { accepted: false, refused: false, received: 0, handedOff: false }
    const opening = new AbortController()
    this.openings.set(r, opening)
    const channelOptions = {
      timeoutMs: options.reducerTimeoutMs,
      maxFrameBytes: this.maxFrameBytes,
      maxQueuedFrames: PART_WINDOW,
      signal: AbortSignal.any([opening.signal, ctx.abort.signal])
    }
    let framed: FrameChannel | null = null
    try {
      framed = options.dialer.takeKept(peer, options.group.infos[r])
      const reused = framed != null
      framed ??= await options.dialer.open(peer, options.group.infos[r], channelOptions)
      ctx.timeline.mark(`channel to ${r} ${reused ? 'reused' : 'open'}`)
      try {
        await this.exchangeWith(r, framed, progress, reused)
      } catch (err) {
        // A direct channel that broke before the reducer accepted it carried nothing: once more,
        // on a new direct channel where it was a kept one (the reducer closed it while idle, or
        // restarted), else over libp2p (the reducer gave up on a TLS handshake slowed by load
        // after our side had finished it). Not after a refusal: the reducer answered, and a new
        // channel gets the same answer later (a member that left our group refused only after its
        // router's wait for the group, and a second channel doubled that: 2.5 → 5 s in chaos runs).
        if (framed.kind !== 'direct' || progress.accepted || progress.refused || ctx.abort.signal.aborted || this.reducersCutOff.has(r)) throw err
        options.log?.debug(`the ${reused ? 'kept' : 'direct'} channel to ${peer} closed before the reducer accepted it (${describeError(err)}); ${reused ? 'opening a new one' : 'sending over libp2p'}`)
        framed.abort(asError(err))
        framed = reused
          ? await options.dialer.open(peer, options.group.infos[r], channelOptions)
          : await options.dialer.openOverLibp2p(peer, channelOptions)
        await this.exchangeWith(r, framed, progress, false)
      }
    } catch (caught) {
      // An opening given up on fails with why: the adaptive cut-off, or the all-reduce timeout.
      const err = this.reducersCutOff.get(r) ?? (ctx.abort.signal.aborted ? asError(ctx.abort.signal.reason) : caught)
      this.deadlines?.failed(r)
      // A read past the reducer timeout, or the all-reduce's, is the fixed deadline (the adaptive one recorded itself).
      if (err instanceof TimeoutError && !this.reducersCutOff.has(r)) this.cutOff.fixed.push(peer)
      this.failed.add(peer)
      if (progress.received === 0) this.unanswered.add(peer)
      if (progress.handedOff) this.handedOff.set(peer, progress.received)
      ctx.partsKeptLocal += (end - start) - progress.received
      options.log?.warn(`keeping ${end - start - progress.received} parts of reducer ${peer}'s span local: ${describeError(err)}`)
      framed?.abort(err instanceof Error ? err : new ProtocolError(describeError(err)))
    }
  }

  /** Our parts of reducer r's span out, its means back in; progress says how far it got. */
  private async exchangeWith (r: number, framed: FrameChannel, progress: ExchangeProgress, reused: boolean): Promise<void> {
    const { ctx } = this
    const { options } = ctx
    const peer = ctx.peer(r)
    const start = ctx.plan.spanStart[r]
    const end = ctx.plan.spanEnd[r]
    if (reused) this.reusedChannels++
    else this.channels[framed.kind]++
    this.reducerChannels.set(r, framed)
    ctx.channelWith(r, framed.kind)
    const cut = this.reducersCutOff.get(r)
    if (cut !== undefined) throw cut
    const onAbort = (): void => { framed.abort(new TimeoutError('all-reduce timed out')) }
    ctx.abort.signal.addEventListener('abort', onAbort, { once: true })
    await framed.write(AggregateHeader.encode({ groupId: options.group.groupId as Uint8Array<ArrayBuffer>, repairOf: (options.repairOf ?? new Uint8Array(0)) as Uint8Array<ArrayBuffer> }))
    const writing = this.writeParts(framed, start, end).then(() => { ctx.timeline.mark(`last part to ${r} written`) })
    writing.catch(() => {})
    const first = await framed.read(options.reducerTimeoutMs)
    if (first == null) throw new ProtocolError(`reducer ${peer} closed the stream before answering`)
    const reply = AggregateReply.decode(first)
    if (reply.code !== MatchCode.ACCEPTED) {
      progress.refused = true
      // A member that runs no such round (it left it, or runs no repair of it) sends us nothing either.
      if (reply.code === MatchCode.NOT_LOOKING_FOR_GROUP) this.hooks.absentSender(r, `it answered that it runs no such round (${reply.reason})`)
      throw new ProtocolError(`reducer ${peer} refused: ${reply.code} ${reply.reason}`)
    }
    progress.accepted = true
    ctx.timeline.mark(`accepted by ${r}`)
    this.deadlines?.accepted(r)
    const wire = COMPRESSION_WIRE[options.codec.name]
    for (let index = start; index < end; index++) {
      const bytes = await framed.readPieces(options.reducerTimeoutMs)
      if (bytes == null) throw new ProtocolError(`reducer ${peer} stopped after ${index - start} of ${end - start} parts`)
      ctx.heardFrom(r, bytes.byteLength)
      const result = decodeTensorPartPieces(bytes)
      if (result.partIndex !== index) throw new ProtocolError(`reducer ${peer} answered part ${result.partIndex} where ${index} was due`)
      if (result.handedOff) {
        progress.handedOff = true
        // It stopped sending too: had it not reached us yet, it never will (seen under load: a wait of the sender timeout).
        this.hooks.absentSender(r, 'it is leaving: it handed its span off before it sent us anything')
        throw new AveragingError(`reducer ${peer} is leaving: it answered ${index - start} of the ${end - start} parts of its span and handed the rest to the group`)
      }
      progress.received++
      this.deadlines?.delivered(r)
      if (index === start || index === end - 1) ctx.timeline.mark(`${index === start ? 'first' : 'last'} mean from ${r}`)
      if (result.data.byteLength === 0) { ctx.partsKeptLocal++; continue }
      if (result.compression !== wire) throw new ProtocolError(`reducer ${peer} used ${result.compression} compression`)
      const part = ctx.plan.parts[index]
      const mean = decodeInto(options.codec, result.data, part.length, ctx.kernels.staging)
      framed.release?.(bytes)
      if (!ctx.kernels.allFinite(part.length)) throw new ProtocolError(`reducer ${peer} sent NaN or infinite values`)
      ctx.applyMean(part, mean)
    }
    await writing
    // Every part out and every mean back: the channel is free for the next round to this reducer.
    ctx.abort.signal.removeEventListener('abort', onAbort)
    this.reducerChannels.delete(r)
    if (!options.dialer.keep(peer, options.group.infos[r], framed)) await framed.closeWrite()
  }

  private changes (): Float32Array {
    this.changeBuffer ??= new Float32Array(this.ctx.options.base?.delta === true ? this.ctx.plan.maxPartElements : 0)
    return this.changeBuffer
  }

  private async writeParts (framed: FrameChannel, start: number, end: number): Promise<void> {
    const { ctx } = this
    const wire = COMPRESSION_WIRE[ctx.options.codec.name]
    for (let index = start; index < end; index++) {
      const part = ctx.plan.parts[index]
      // A view of our tensors for the 'none' codec: they change only when this part's mean comes
      // back, which the reducer sends after it has read the whole part. Other codecs' bytes are in
      // lent memory, back for reuse once the channel has written them (a delta round's changes
      // are encoded, never sent as a view: only lossy codecs take changes).
      const data = encodeForWire(ctx.options.codec, ctx.outgoing(part, this.changes()))
      const frame = encodeTensorPartPieces({ partIndex: index, compression: wire, data })
      await framed.write(frame, returnWhenFlushed(data, 1))
      ctx.bytesSent += payloadBytes(frame)
    }
  }

  /** Exactly what a reducer timeout does, only sooner: the rest of its span stays local. */
  private cutOffAdaptively ({ reducer, part, waitedMs, wait, samples, silentSender, unaccepted, unanswered, checkUnanswered }: ReducerCutOff): void {
    const { ctx } = this
    const peer = ctx.peer(reducer)
    const ms = (x: number): number => Math.round(x)
    const when = checkUnanswered ? `and did not answer a liveness check within ${ms(ctx.lastCheckMs(reducer))} ms` : 'within the adaptive deadline'
    const why = new ProtocolError(unanswered
      ? `reducer ${peer} owes us ${unaccepted ? 'its acceptance of our stream' : `the mean of part ${ctx.plan.spanStart[reducer] + part}`}, and as a sender it was silent and did not answer a liveness check: not waited for`
      : unaccepted
      ? `reducer ${peer} did not accept our stream ${when}: waited ${ms(waitedMs)} ms, limit ${ms(wait.limitMs)} ms ` +
        `(median ${ms(wait.medianMs)} ms, MAD ${ms(wait.madMs)} ms of the times ${samples} reducer(s) took to accept)`
      : silentSender
      ? `reducer ${peer} sent no mean of part ${ctx.plan.spanStart[reducer] + part} by the time ${samples} reducer(s) had (waited ${ms(waitedMs)} ms), ` +
        'and we had cut it off as a sender for silence within the adaptive deadline'
      : `reducer ${peer} sent no mean of part ${ctx.plan.spanStart[reducer] + part} ${when}: ` +
        `waited ${ms(waitedMs)} ms, limit ${ms(wait.limitMs)} ms (median ${ms(wait.medianMs)} ms, MAD ${ms(wait.madMs)} ms of the waits of ${samples} reducer(s) that answered it)`)
    this.cutOff.adaptive.push(peer)
    this.reducersCutOff.set(reducer, why)
    this.openings.get(reducer)?.abort(why)
    this.reducerChannels.get(reducer)?.abort(why)
  }
}

function asError (reason: unknown): Error {
  return reason instanceof Error ? reason : new ProtocolError(describeError(reason))
}
