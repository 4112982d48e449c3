import type { Connection, Stream } from '@libp2p/interface'
import { FramedStream } from '../net/framed-stream.js'
import type { FrameChannel } from '../net/frame-channel.js'
import { AggregateHeader, AggregateReply, MatchCode } from '../proto/averaging.js'
import { groupIdHex } from '../matchmaking/group-info.js'
import { ProtocolError, describeError } from '../errors.js'
import type { AllReduceRunner } from './runner.js'
import { AGGREGATE_RECEIVE_WINDOW, KEPT_HEADER_WAIT_MS, PART_WINDOW } from './aggregate-protocol.js'
import { capReceiveWindow } from '../net/stream-window.js'
import { PerPeerStreamLimit } from '../net/rpc.js'

/** Concurrent aggregate channels one peer may hold (one per round, a few rounds overlapping, kept ones idle between rounds). */
const MAX_CHANNELS_PER_PEER = 8
/** Channels waiting for their group to be registered, all peers together. */
const MAX_WAITING_CHANNELS = 256
/** Rounds remembered as ended here: a late stream for one of them, or for a repair of one, is answered at once. */
const FINISHED_KEPT = 256


/**
 * Routes inbound aggregate streams to the all-reduce of their group. An unknown group, a
 * garbage header or a peer outside the group gets an error reply and a closed stream.
 */
export class AggregateRouter {
  private readonly runners = new Map<string, AllReduceRunner>()
  private readonly waiting = new Map<string, Array<(runner: AllReduceRunner | null) => void>>()
  /** Of the groups waited for, the repairs: the round each repairs. */
  private readonly repairs = new Map<string, string>()
  /** Rounds that ended here, oldest first. */
  private readonly finished = new Set<string>()
  private readonly perPeer = new PerPeerStreamLimit(MAX_CHANNELS_PER_PEER)
  private waiters = 0

  /**
   * headerTimeoutMs bounds both the wait for a stream's first frame and the wait for its group
   * to be registered here (the leader's BEGIN can race the first part).
   */
  constructor (private readonly maxFrameBytes: number, private readonly headerTimeoutMs: number) {}

  register (groupId: Uint8Array, runner: AllReduceRunner): void {
    const key = groupIdHex(groupId)
    this.runners.set(key, runner)
    for (const wake of [...this.waiting.get(key) ?? []]) wake(runner)
  }

  /**
   * The round ended here. Its repair, if any, is registered in the same turn (averager.ts); a stream
   * waiting for a repair of it that is not registered by the next turn is told at once that none runs
   * here, so the member repairing leaves us out now instead of a sender timeout later.
   */
  unregister (groupId: Uint8Array): void {
    const key = groupIdHex(groupId)
    this.runners.delete(key)
    this.finished.add(key)
    if (this.finished.size > FINISHED_KEPT) this.finished.delete(this.finished.values().next().value!)
    setImmediate(() => {
      for (const [repair, round] of this.repairs) {
        if (round !== key || this.runners.has(repair)) continue
        for (const wake of this.waiting.get(repair) ?? []) wake(null)
      }
    })
  }

  /** The libp2p stream handler of the aggregate protocol. */
  readonly handler = (stream: Stream, connection: Connection): void => {
    capReceiveWindow(stream, AGGREGATE_RECEIVE_WINDOW)
    this.accept(new FramedStream(stream, { maxFrameBytes: this.maxFrameBytes, maxQueuedFrames: PART_WINDOW }), connection.remotePeer.toString())
  }

  /** Routes an inbound channel from an authenticated peer, whichever path carried it. */
  accept (framed: FrameChannel, remotePeer: string): void {
    // A sender needs one channel per round; a few rounds may overlap while old ones drain.
    const release = this.perPeer.tryAcquire(remotePeer)
    if (release == null) {
      framed.abort(new ProtocolError(`too many concurrent aggregate channels from ${remotePeer}`))
      return
    }
    void (async () => {
      try {
        // A kept channel (keptAggregateProtocol) carries the sender's rounds one after another.
        for (let rounds = 0; ; rounds++) {
          const first = await framed.read(rounds === 0 ? this.headerTimeoutMs : KEPT_HEADER_WAIT_MS)
          if (first == null) {
            // The sender closed a kept channel it no longer needs: so do we.
            if (rounds > 0) await framed.closeWrite()
            return
          }
          if (!(await this.route(framed, remotePeer, first))) return
        }
      } catch (err) {
        framed.abort(err instanceof Error ? err : new ProtocolError(describeError(err)))
      } finally {
        release()
      }
    })()
  }

  /** One round's header on a channel: to its all-reduce, or refused. Resolves whether the channel carries another round. */
  private async route (framed: FrameChannel, remotePeer: string, first: Uint8Array): Promise<boolean> {
    const header = AggregateHeader.decode(first)
    if (header.groupId.byteLength !== 20) throw new ProtocolError('aggregate header without a valid group id')
    const key = groupIdHex(header.groupId)
    const round = header.repairOf.byteLength === 20 ? groupIdHex(header.repairOf) : undefined
    // A round that ended here, or a repair of one that ran none, will not be registered any more.
    const ended = this.finished.has(key) || (round !== undefined && this.finished.has(round))
    const runner = this.runners.get(key) ?? (ended ? null : await this.runnerFor(key, round))
    if (runner == null) {
      await framed.write(AggregateReply.encode({ code: MatchCode.NOT_LOOKING_FOR_GROUP, reason: round !== undefined ? 'no repair of that round here' : 'unknown group' }))
      await framed.closeWrite()
      return false
    }
    return await runner.acceptSender(framed, remotePeer)
  }

  /** `round`: the round the group repairs, when it is a repair (its end without one ends the wait). */
  private async runnerFor (key: string, round?: string): Promise<AllReduceRunner | null> {
    const known = this.runners.get(key)
    if (known != null) return known
    // Headers may race their group's registration by a moment; strangers' guesses must not pile up.
    if (this.waiters >= MAX_WAITING_CHANNELS) return null
    this.waiters++
    try {
      return await new Promise<AllReduceRunner | null>(resolve => {
        const list = this.waiting.get(key) ?? []
        const timer = setTimeout(() => { wake(null) }, this.headerTimeoutMs)
        const wake = (runner: AllReduceRunner | null): void => {
          clearTimeout(timer)
          const current = this.waiting.get(key)
          if (current != null) {
            const rest = current.filter(w => w !== wake)
            if (rest.length > 0) this.waiting.set(key, rest); else { this.waiting.delete(key); this.repairs.delete(key) }
          }
          resolve(runner)
        }
        list.push(wake)
        this.waiting.set(key, list)
        if (round !== undefined) this.repairs.set(key, round)
      })
    } finally {
      this.waiters--
    }
  }
}
