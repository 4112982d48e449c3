import type { Connection, Stream } from '@libp2p/interface'
import { FramedStream } from '../net/framed-stream.js'
import type { FrameChannel } from '../net/frame-channel.js'
import { AggregateHeader, AggregateReply, MatchCode } from '../proto/averaging.js'
import { groupIdHex } from '../matchmaking/group-info.js'
import { ProtocolError, describeError } from '../errors.js'
import type { AllReduceRunner } from './runner.js'
import { PART_WINDOW } from './aggregate-protocol.js'
import { PerPeerStreamLimit } from '../net/rpc.js'

/** Concurrent aggregate channels one peer may hold (one per round, a few rounds overlapping). */
const MAX_CHANNELS_PER_PEER = 8
/** Channels waiting for their group to be registered, all peers together. */
const MAX_WAITING_CHANNELS = 256


/**
 * Routes inbound aggregate streams to the all-reduce of their group. An unknown group, a
 * garbage header or a peer outside the group gets an error reply and a closed stream.
 */
export class AggregateRouter {
  private readonly runners = new Map<string, AllReduceRunner>()
  private readonly waiting = new Map<string, Array<(runner: AllReduceRunner) => void>>()
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
    for (const wake of this.waiting.get(key) ?? []) wake(runner)
    this.waiting.delete(key)
  }

  unregister (groupId: Uint8Array): void {
    this.runners.delete(groupIdHex(groupId))
  }

  /** The libp2p stream handler of the aggregate protocol. */
  readonly handler = (stream: Stream, connection: Connection): void => {
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
        const first = await framed.read(this.headerTimeoutMs)
        if (first == null) return
        const header = AggregateHeader.decode(first)
        if (header.groupId.byteLength !== 20) throw new ProtocolError('aggregate header without a valid group id')
        const runner = await this.runnerFor(groupIdHex(header.groupId))
        if (runner == null) {
          await framed.write(AggregateReply.encode({ code: MatchCode.NOT_LOOKING_FOR_GROUP, reason: 'unknown group' }))
          await framed.closeWrite()
          return
        }
        await runner.acceptSender(framed, remotePeer)
      } catch (err) {
        framed.abort(err instanceof Error ? err : new ProtocolError(describeError(err)))
      } finally {
        release()
      }
    })()
  }

  private async runnerFor (key: string): Promise<AllReduceRunner | null> {
    const known = this.runners.get(key)
    if (known != null) return known
    // Headers may race their group's registration by a moment; strangers' guesses must not pile up.
    if (this.waiters >= MAX_WAITING_CHANNELS) return null
    this.waiters++
    try {
      return await new Promise<AllReduceRunner | null>(resolve => {
        const list = this.waiting.get(key) ?? []
        const timer = setTimeout(() => {
          const current = this.waiting.get(key)
          if (current != null) {
            const rest = current.filter(w => w !== wake)
            if (rest.length > 0) this.waiting.set(key, rest); else this.waiting.delete(key)
          }
          resolve(null)
        }, this.headerTimeoutMs)
        const wake = (runner: AllReduceRunner): void => { clearTimeout(timer); resolve(runner) }
        list.push(wake)
        this.waiting.set(key, list)
      })
    } finally {
      this.waiters--
    }
  }
}
