import { peerIdFromString } from '@libp2p/peer-id'
import type { PeerId } from '@libp2p/interface'
import type { SwarmNode } from '../net/node.js'
import type { DataChannelKind, DirectFrameChannel, FrameChannel } from '../net/frame-channel.js'
import { openFramed } from '../net/rpc.js'
import type { DirectTransport } from '../net/direct/direct-transport.js'
import { directEndpointsOf } from '../net/direct/endpoints.js'
import { dataEndpointsFromWire } from '../net/direct/data-addrs.js'
import type { DataChannelIdentity } from '../net/direct/identity.js'
import { ProtocolError, describeError } from '../errors.js'
import type { PeerInfo } from '../proto/averaging.js'
import { AGGREGATE_RECEIVE_WINDOW, KEPT_IDLE_MS, aggregateProtocol, directAggregateProtocols, isKeptChannel } from './aggregate-protocol.js'
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


/** Idle kept channels held to one reducer: a round to it takes one, a second covers two rounds overlapping. */
const IDLE_PER_PEER = 2
/** Reducers whose working direct host is remembered (the oldest forgotten first): a swarm's worth. */
const REMEMBERED_HOSTS = 4096

/**
 * Opens the channel that carries our parts to a reducer: the direct TLS data channel when the
 * reducer advertised one and we have an identity for it, else (or when it cannot be reached) a
 * libp2p stream. Either way the reducer is authenticated as the group member we expect. A direct
 * channel whose round went through whole is kept for the next round to the same reducer
 * (keptAggregateProtocol): no TCP and TLS handshakes, no libp2p dial first.
 */
export class AggregateDialer {
  /** Channels opened per path since start, for logs and metrics. */
  readonly opened: Record<DataChannelKind, number> = { direct: 0, libp2p: 0 }
  /** Rounds sent over a kept channel instead of a new one, since start. */
  reused = 0
  private readonly live = new Set<DirectFrameChannel>()
  /** Kept channels waiting for the next round, by reducer peer id and data port (poolKey), each with its idle timer. */
  private readonly idle = new Map<string, Map<DirectFrameChannel, NodeJS.Timeout>>()
  /** The host each reducer's last direct channel opened at, by poolKey: tried first next time. */
  private readonly goodHosts = new Map<string, string>()

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
      const key = poolKey(peer, port)
      for (const { host, port: at } of await directEndpointsOf(this.node, peerId, port, dataEndpointsFromWire(info.dataAddrs), this.goodHosts.get(key))) {
        try {
          const channel = await unlessAborted(this.transport.dial({
            identity: this.identity,
            host,
            port: at,
            protocols: directAggregateProtocols(this.prefix),
            expectedPeer: peerId,
            timeoutMs: Math.min(options.timeoutMs, 5000),
            maxFrameBytes: options.maxFrameBytes,
            maxQueuedFrames: options.maxQueuedFrames
          }), options.signal)
          this.opened.direct++
          this.remember(key, host)
          this.live.add(channel)
          void channel.closed.then(() => {
            this.live.delete(channel)
            this.unkeep(key, channel)
          })
          return channel
        } catch (err) {
          if (options.signal?.aborted === true) throw options.signal.reason
          if (this.goodHosts.get(key) === host) this.goodHosts.delete(key)
          this.log.debug(`no direct channel to ${peer} at ${host}:${at} (${describeError(err)}); trying the next way`)
        }
      }
    }
    return await this.openLibp2p(peerId, options)
  }

  /** A libp2p stream to the reducer, for when its direct channel broke before it accepted us. */
  async openOverLibp2p (peer: string, options: ChannelOptions): Promise<FrameChannel> {
    return await this.openLibp2p(peerIdFromString(peer), options)
  }

  /**
   * An idle kept channel to this reducer at the data port it advertises now (a restarted agent's new
   * port is a new channel), taken out of the pool for a round; null: none.
   */
  takeKept (peer: string, info: PeerInfo): DirectFrameChannel | null {
    const key = poolKey(peer, info.dataPort ?? 0)
    const channels = this.idle.get(key)
    if (channels == null) return null
    for (const channel of channels.keys()) {
      this.unkeep(key, channel)
      if (!this.live.has(channel)) continue
      this.reused++
      return channel
    }
    return null
  }

  /**
   * A channel whose round went through whole (every part out, every mean back): kept for the next
   * round to the same reducer if it speaks keptAggregateProtocol and there is room; false: the
   * caller half-closes it as the round's end.
   */
  keep (peer: string, info: PeerInfo, channel: FrameChannel): boolean {
    if (!isKeptChannel(channel) || !this.live.has(channel) || this.node.status !== 'started') return false
    const key = poolKey(peer, info.dataPort ?? 0)
    let channels = this.idle.get(key)
    if (channels == null) this.idle.set(key, channels = new Map())
    if (channels.size >= IDLE_PER_PEER) return false
    const timer = setTimeout(() => {
      this.unkeep(key, channel)
      channel.abort(new ProtocolError(`the kept channel to ${peer} was idle for ${KEPT_IDLE_MS} ms`))
    }, KEPT_IDLE_MS)
    timer.unref()
    channels.set(channel, timer)
    return true
  }

  /** Drops every direct channel we opened (the node stopped). */
  closeAll (reason: Error): void {
    for (const channels of this.idle.values()) for (const timer of channels.values()) clearTimeout(timer)
    this.idle.clear()
    for (const channel of this.live) channel.abort(reason)
    this.live.clear()
  }

  private remember (key: string, host: string): void {
    this.goodHosts.delete(key)
    this.goodHosts.set(key, host)
    if (this.goodHosts.size > REMEMBERED_HOSTS) this.goodHosts.delete(this.goodHosts.keys().next().value as string)
  }

  private unkeep (key: string, channel: DirectFrameChannel): void {
    const channels = this.idle.get(key)
    const timer = channels?.get(channel)
    if (channels == null || timer === undefined) return
    clearTimeout(timer)
    channels.delete(channel)
    if (channels.size === 0) this.idle.delete(key)
  }

  private async openLibp2p (peerId: PeerId, options: ChannelOptions): Promise<FrameChannel> {
    options.signal?.throwIfAborted()
    const channel = await openFramed(this.node, peerId, aggregateProtocol(this.prefix), { ...options, receiveWindowBytes: AGGREGATE_RECEIVE_WINDOW }).catch((err: unknown) => {
      throw options.signal?.aborted === true ? options.signal.reason : err
    })
    this.opened.libp2p++
    return channel
  }
}

function poolKey (peer: string, port: number): string {
  return `${peer}:${port}`
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
