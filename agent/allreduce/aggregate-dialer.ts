import { peerIdFromString } from '@libp2p/peer-id'
import type { PeerId } from '@libp2p/interface'
import type { SwarmNode } from '../net/node.js'
import type { DataChannelKind, DirectFrameChannel, FrameChannel } from '../net/frame-channel.js'
import { openFramed } from '../net/rpc.js'
import type { DirectTransport } from '../net/direct/direct-transport.js'
import { directHostsOf } from '../net/direct/endpoints.js'
import type { DataChannelIdentity } from '../net/direct/identity.js'
import { ProtocolError, describeError } from '../errors.js'
import type { PeerInfo } from '../proto/averaging.js'
import { aggregateProtocol } from './aggregate-protocol.js'
import { silentLog, type Log } from '../log.js'

export interface ChannelOptions {
  readonly timeoutMs: number
  readonly maxFrameBytes: number
  readonly maxQueuedFrames: number
  /**
   * Gives up on the opening before timeoutMs: the all-reduce no longer wants this reducer (its
   * adaptive deadline cut it off, or the round timed out). The open rejects with the signal's reason.
   */
  readonly signal?: AbortSignal
}


/**
 * Opens the channel that carries our parts to a reducer: the direct TLS data channel when the
 * reducer advertised one and we have an identity for it, else (or when it cannot be reached) a
 * libp2p stream. Either way the reducer is authenticated as the group member we expect.
 */
export class AggregateDialer {
  /** Channels opened per path since start, for logs and metrics. */
  readonly opened: Record<DataChannelKind, number> = { direct: 0, libp2p: 0 }
  private readonly live = new Set<DirectFrameChannel>()

  constructor (
    private readonly node: SwarmNode,
    private readonly prefix: string,
    private readonly identity: DataChannelIdentity | null,
    private readonly transport: DirectTransport | null,
    private readonly log: Log = silentLog
  ) {}

  get hasIdentity (): boolean { return this.identity != null }

  async open (peer: string, info: PeerInfo, options: ChannelOptions): Promise<FrameChannel> {
    const peerId = peerIdFromString(peer)
    const port = info.dataPort ?? 0
    // The data channel lives and dies with the node: a stopping node dials nothing directly.
    if (this.identity != null && this.transport != null && port > 0 && this.node.status === 'started') {
      // The reducer admits data channels only from peers with a libp2p connection (the private
      // network and allow list live there): make sure we hold one.
      await this.node.dial(peerId, { signal: bounded(options) }).catch((err: unknown) => {
        throw options.signal?.aborted === true ? options.signal.reason : err
      })
      for (const host of await directHostsOf(this.node, peerId)) {
        try {
          const channel = await unlessAborted(this.transport.dial({
            identity: this.identity,
            host,
            port,
            protocol: aggregateProtocol(this.prefix),
            expectedPeer: peerId,
            timeoutMs: Math.min(options.timeoutMs, 5000),
            maxFrameBytes: options.maxFrameBytes,
            maxQueuedFrames: options.maxQueuedFrames
          }), options.signal)
          this.opened.direct++
          this.live.add(channel)
          void channel.closed.then(() => this.live.delete(channel))
          return channel
        } catch (err) {
          if (options.signal?.aborted === true) throw options.signal.reason
          this.log.debug(`no direct channel to ${peer} at ${host}:${port} (${describeError(err)}); trying the next way`)
        }
      }
    }
    return await this.openLibp2p(peerId, options)
  }

  /** A libp2p stream to the reducer, for when its direct channel broke before it accepted us. */
  async openOverLibp2p (peer: string, options: ChannelOptions): Promise<FrameChannel> {
    return await this.openLibp2p(peerIdFromString(peer), options)
  }

  /** Drops every direct channel we opened (the node stopped). */
  closeAll (reason: Error): void {
    for (const channel of this.live) channel.abort(reason)
    this.live.clear()
  }

  private async openLibp2p (peerId: PeerId, options: ChannelOptions): Promise<FrameChannel> {
    options.signal?.throwIfAborted()
    const channel = await openFramed(this.node, peerId, aggregateProtocol(this.prefix), options).catch((err: unknown) => {
      throw options.signal?.aborted === true ? options.signal.reason : err
    })
    this.opened.libp2p++
    return channel
  }
}

/** The opening's own timeout, and the caller's signal if it gave one. */
function bounded (options: ChannelOptions): AbortSignal {
  const timeout = AbortSignal.timeout(options.timeoutMs)
  return options.signal != null ? AbortSignal.any([timeout, options.signal]) : timeout
}

/**
 * The channel being opened, or the signal's reason as soon as it aborts. The direct dial runs on
 * this thread or on a data thread, where no signal reaches: a channel that opens after the abort
 * is torn down at once.
 */
export async function unlessAborted<T extends FrameChannel> (opening: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal == null) return await opening
  if (signal.aborted) {
    opening.then(channel => { channel.abort(asError(signal.reason)) }, () => {})
    throw signal.reason
  }
  return await new Promise<T>((resolve, reject) => {
    const onAbort = (): void => {
      reject(signal.reason)
      opening.then(channel => { channel.abort(asError(signal.reason)) }, () => {})
    }
    signal.addEventListener('abort', onAbort, { once: true })
    opening.then(
      (channel) => { signal.removeEventListener('abort', onAbort); resolve(channel) },
      (err) => { signal.removeEventListener('abort', onAbort); reject(err) }
    )
  })
}

function asError (reason: unknown): Error {
  return reason instanceof Error ? reason : new ProtocolError(describeError(reason))
}
