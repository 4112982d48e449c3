import { peerIdFromString } from '@libp2p/peer-id'
import { capReceiveWindow } from './stream-window.js'
import { multiaddr } from '@multiformats/multiaddr'
import type { AbortOptions, PeerId, PeerStore, Stream, Connection, StreamHandler, StreamHandlerOptions } from '@libp2p/interface'
import type { Multiaddr } from '@multiformats/multiaddr'
import { FramedStream } from './framed-stream.js'
import { ProtocolError, TimeoutError, describeError } from '../errors.js'
import { awakeTimeout } from '../util/awake-timeout.js'

const encoder = new TextEncoder()
const decoder = new TextDecoder()

/**
 * What the helpers below use of a libp2p node. A SwarmNode is one; a libp2p service, which is
 * handed the node's components and not the node, makes one of them with rpcNodeOf.
 */
export interface RpcNode {
  readonly peerId: PeerId
  readonly peerStore: PeerStore
  handle (protocol: string, handler: StreamHandler, options?: StreamHandlerOptions): Promise<void>
  unhandle (protocol: string): Promise<void>
  /** `force` opens a new connection beside those already open. */
  dial (peer: PeerId, options?: AbortOptions & { force?: boolean }): Promise<Connection>
  dialProtocol (peer: PeerId, protocol: string, options?: AbortOptions): Promise<Stream>
  getConnections (peer?: PeerId): Connection[]
  getMultiaddrs (): Multiaddr[]
}

/** The libp2p components an RpcNode is made of (a service's view of the node). */
export interface RpcComponents {
  readonly peerId: PeerId
  readonly peerStore: PeerStore
  readonly registrar: Pick<RpcNode, 'handle' | 'unhandle'>
  readonly connectionManager: {
    openConnection: (peer: PeerId, options?: AbortOptions & { priority?: number }) => Promise<Connection>
    openStream: (peer: PeerId, protocol: string, options?: AbortOptions) => Promise<Stream>
    getConnections: (peer?: PeerId) => Connection[]
  }
  readonly addressManager: { getAddresses: () => Multiaddr[] }
}

/** An RpcNode over a service's components, doing what js-libp2p's own node methods do with them. */
export function rpcNodeOf (components: RpcComponents): RpcNode {
  return {
    get peerId () { return components.peerId },
    get peerStore () { return components.peerStore },
    handle: async (protocol, handler, options) => { await components.registrar.handle(protocol, handler, options) },
    unhandle: async (protocol) => { await components.registrar.unhandle(protocol) },
    // libp2p's node.dial puts a user's dial ahead of its own (priority 75): so does ours.
    dial: async (peer, options) => await components.connectionManager.openConnection(peer, { priority: 75, ...options }),
    dialProtocol: async (peer, protocol, options) => await components.connectionManager.openStream(peer, protocol, options),
    getConnections: (peer) => components.connectionManager.getConnections(peer),
    getMultiaddrs: () => components.addressManager.getAddresses()
  }
}

/** Peer ids travel as the UTF-8 bytes of their string form: unambiguous and validated on parse. */
export function peerIdToBytes (peer: PeerId | string): Uint8Array {
  return encoder.encode(peer.toString())
}

export function peerIdFromBytes (bytes: Uint8Array): PeerId {
  if (bytes.byteLength === 0 || bytes.byteLength > 128) throw new ProtocolError('peer id on the wire has an impossible length')
  try {
    return peerIdFromString(decoder.decode(bytes))
  } catch {
    throw new ProtocolError('peer id on the wire is not a valid peer id')
  }
}

/** Teaches the peer store where a peer listens, from multiaddr bytes a message carried. */
export async function rememberAddrs (node: RpcNode, peer: PeerId, addrs: readonly Uint8Array[]): Promise<void> {
  if (addrs.length === 0 || peer.equals(node.peerId)) return
  const multiaddrs = []
  for (const bytes of addrs.slice(0, 16)) {
    try { multiaddrs.push(multiaddr(bytes)) } catch { /* an unparsable address is skipped, not fatal */ }
  }
  if (multiaddrs.length > 0) await node.peerStore.merge(peer, { multiaddrs })
}

export function ownAddrBytes (node: RpcNode): Uint8Array[] {
  return node.getMultiaddrs().map(ma => ma.bytes)
}

/** The /p2p component's multicodec: an address without it is where a peer listens, whoever it is. */
export const P2P_CODE = 421

/**
 * Whether a peer's announced addresses are where we listen: our previous incarnation, which a
 * restarted agent (new peer id, same address) still finds listed as a leader or state donor until
 * its entry expires. Dialling it is a failed handshake with ourselves (0.3 s of every restart).
 * Relayed addresses never count: every peer behind one relay shares its address.
 */
export function atOwnAddress (node: Pick<RpcNode, 'getMultiaddrs'>, addrs: readonly Uint8Array[]): boolean {
  const where = (ma: Multiaddr): string | undefined =>
    ma.getComponents().some(c => c.name === 'p2p-circuit') ? undefined : ma.decapsulateCode(P2P_CODE).toString()
  const own = new Set(node.getMultiaddrs().map(where).filter(a => a !== undefined))
  return addrs.some(bytes => {
    try {
      const at = where(multiaddr(bytes))
      return at !== undefined && own.has(at)
    } catch {
      return false
    }
  })
}

export interface OpenOptions {
  readonly timeoutMs: number
  readonly maxFrameBytes: number
  readonly maxQueuedFrames?: number
  /** The connection to open the stream on (default: the one libp2p picks, the first open one). */
  readonly connection?: Connection
  /** Gives up on the opening before the timeout (the caller no longer wants the stream). */
  readonly signal?: AbortSignal
  /** Caps the stream's yamux receive window (stream-window.ts); default: the node's setting. */
  readonly receiveWindowBytes?: number
}

/** Opens a framed stream to a peer on a protocol, bounded by a timeout (and the caller's signal, if any). */
export async function openFramed (node: RpcNode, peer: PeerId, protocol: string, options: OpenOptions): Promise<FramedStream> {
  // In time we were awake to see the stream open (awake-timeout.ts).
  const timeout = awakeTimeout(options.timeoutMs)
  const signal = options.signal != null ? AbortSignal.any([timeout.signal, options.signal]) : timeout.signal
  try {
    const stream = options.connection != null ? await options.connection.newStream(protocol, { signal }) : await node.dialProtocol(peer, protocol, { signal })
    if (options.receiveWindowBytes !== undefined) capReceiveWindow(stream, options.receiveWindowBytes)
    return new FramedStream(stream, { maxFrameBytes: options.maxFrameBytes, maxQueuedFrames: options.maxQueuedFrames })
  } finally {
    timeout.clear()
  }
}

/**
 * Bounds one peer's open inbound streams on one protocol across all its connections (libp2p's
 * maxInboundStreams counts per connection, and a peer may open several connections).
 */
export class PerPeerStreamLimit {
  private readonly open = new Map<string, number>()

  constructor (readonly max: number) {}

  /** A release function when the peer is under its bound, null when the stream must be refused. */
  tryAcquire (peer: string): (() => void) | null {
    const count = this.open.get(peer) ?? 0
    if (count >= this.max) return null
    this.open.set(peer, count + 1)
    let released = false
    return () => {
      if (released) return
      released = true
      const left = (this.open.get(peer) ?? 1) - 1
      if (left <= 0) this.open.delete(peer); else this.open.set(peer, left)
    }
  }

  /** Peers holding at least one stream (tests and metrics). */
  get peers (): number { return this.open.size }
}

/** Resets a stream a peer opened beyond its bound: the cheapest answer, nothing is read or buffered. */
export function refuseStream (stream: Stream, protocol: string): void {
  stream.abort(new ProtocolError(`too many concurrent ${protocol} streams from this peer`))
}

export interface UnaryHandlerOptions {
  readonly maxRequestBytes: number
  /** Bounds the whole exchange: the request's arrival, the answer and its sending. */
  readonly timeoutMs: number
  /** Per connection (libp2p's own bound). */
  readonly maxInboundStreams?: number
  /** Per remote peer, across its connections. */
  readonly maxStreamsPerPeer?: number
}

/**
 * Registers a one-request-one-response protocol. A malformed request, a handler error or an
 * exchange running past the timeout closes that stream only; the node goes on serving.
 */
export async function handleUnary (
  node: RpcNode,
  protocol: string,
  respond: (request: Uint8Array, from: PeerId) => Promise<Uint8Array> | Uint8Array,
  options: UnaryHandlerOptions
): Promise<void> {
  const perPeer = new PerPeerStreamLimit(options.maxStreamsPerPeer ?? 16)
  await node.handle(protocol, (stream: Stream, connection: Connection) => {
    const release = perPeer.tryAcquire(connection.remotePeer.toString())
    if (release == null) { refuseStream(stream, protocol); return }
    const framed = new FramedStream(stream, { maxFrameBytes: options.maxRequestBytes, maxQueuedFrames: 1 })
    // A peer that sends its request and then never reads the answer must not hold the stream.
    const deadline = setTimeout(() => { framed.abort(new TimeoutError(`${protocol} exchange took longer than ${options.timeoutMs} ms`)) }, options.timeoutMs)
    void (async () => {
      try {
        const request = await framed.read(options.timeoutMs)
        if (request == null) { await framed.closeWrite(); return }
        const response = await respond(request, connection.remotePeer)
        await framed.write(response)
        await framed.closeWrite()
      } catch (err) {
        framed.abort(err instanceof Error ? err : new ProtocolError(describeError(err)))
      } finally {
        clearTimeout(deadline)
        release()
      }
    })()
  }, { maxInboundStreams: options.maxInboundStreams ?? 32, maxOutboundStreams: 64, runOnLimitedConnection: false })
}

/** Calls a unary protocol: one request frame out, one response frame back. */
export async function callUnary (node: RpcNode, peer: PeerId, protocol: string, request: Uint8Array, options: OpenOptions): Promise<Uint8Array> {
  const framed = await openFramed(node, peer, protocol, options)
  try {
    await framed.write(request)
    const response = await framed.read(options.timeoutMs)
    if (response == null) throw new ProtocolError(`peer ${peer.toString()} closed ${protocol} without answering`)
    return response
  } finally {
    await framed.closeWrite()
  }
}
