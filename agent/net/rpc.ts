import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import type { PeerId, Stream, Connection } from '@libp2p/interface'
import type { SwarmNode } from './node.js'
import { FramedStream } from './framed-stream.js'
import { ProtocolError, describeError } from '../errors.js'

const encoder = new TextEncoder()
const decoder = new TextDecoder()

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
export async function rememberAddrs (node: SwarmNode, peer: PeerId, addrs: readonly Uint8Array[]): Promise<void> {
  if (addrs.length === 0 || peer.equals(node.peerId)) return
  const multiaddrs = []
  for (const bytes of addrs.slice(0, 16)) {
    try { multiaddrs.push(multiaddr(bytes)) } catch { /* an unparsable address is skipped, not fatal */ }
  }
  if (multiaddrs.length > 0) await node.peerStore.merge(peer, { multiaddrs })
}

export function ownAddrBytes (node: SwarmNode): Uint8Array[] {
  return node.getMultiaddrs().map(ma => ma.bytes)
}

export interface OpenOptions {
  readonly timeoutMs: number
  readonly maxFrameBytes: number
  readonly maxQueuedFrames?: number
}

/** Opens a framed stream to a peer on a protocol, bounded by a timeout. */
export async function openFramed (node: SwarmNode, peer: PeerId, protocol: string, options: OpenOptions): Promise<FramedStream> {
  const stream = await node.dialProtocol(peer, protocol, { signal: AbortSignal.timeout(options.timeoutMs) })
  return new FramedStream(stream, { maxFrameBytes: options.maxFrameBytes, maxQueuedFrames: options.maxQueuedFrames })
}

export interface UnaryHandlerOptions {
  readonly maxRequestBytes: number
  readonly timeoutMs: number
  readonly maxInboundStreams?: number
}

/**
 * Registers a one-request-one-response protocol. A malformed request or a handler error closes
 * that stream only; the node goes on serving.
 */
export async function handleUnary (
  node: SwarmNode,
  protocol: string,
  respond: (request: Uint8Array, from: PeerId) => Promise<Uint8Array> | Uint8Array,
  options: UnaryHandlerOptions
): Promise<void> {
  await node.handle(protocol, (stream: Stream, connection: Connection) => {
    const framed = new FramedStream(stream, { maxFrameBytes: options.maxRequestBytes, maxQueuedFrames: 1 })
    void (async () => {
      try {
        const request = await framed.read(options.timeoutMs)
        if (request == null) { await framed.closeWrite(); return }
        const response = await respond(request, connection.remotePeer)
        await framed.write(response)
        await framed.closeWrite()
      } catch (err) {
        framed.abort(err instanceof Error ? err : new ProtocolError(describeError(err)))
      }
    })()
  }, { maxInboundStreams: options.maxInboundStreams ?? 64, runOnLimitedConnection: false })
}

/** Calls a unary protocol: one request frame out, one response frame back. */
export async function callUnary (node: SwarmNode, peer: PeerId, protocol: string, request: Uint8Array, options: OpenOptions): Promise<Uint8Array> {
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
