import { peerIdFromString } from '@libp2p/peer-id'
import type { SwarmNode } from '../net/node.js'
import type { NamedTensor } from '../averager.js'
import { openFramed } from '../net/rpc.js'
import type { FrameChannel } from '../net/frame-channel.js'
import type { DirectTransport } from '../net/direct/direct-transport.js'
import type { DataChannelIdentity } from '../net/direct/identity.js'
import { directEndpointsOf } from '../net/direct/endpoints.js'
import type { DataEndpoint } from '../net/direct/data-addrs.js'
import { StateChunk, StateHeader, StateRequest } from '../proto/averaging.js'
import { AveragingError, ProtocolError, TimeoutError, describeError } from '../errors.js'
import { CHUNK_BYTES, chunkView, MAX_CHUNK_FRAME_BYTES, MAX_HEADER_FRAME_BYTES, validateHeader, type ChunkView, type ExpectedTensor } from './state-protocol.js'
import { Uint8ArrayList } from 'uint8arraylist'

export interface DownloadedState {
  readonly tensors: NamedTensor[]
  readonly metadata: Record<string, unknown>
}

export interface DownloadFromOptions {
  readonly requestTimeoutMs: number
  readonly maxStateBytes: number
  readonly expected?: readonly ExpectedTensor[]
  /** Slowest transfer accepted, so a donor trickling one chunk per timeout cannot hold us for hours (default 1 MiB/s). */
  readonly minBytesPerSecond?: number
  /** Called after every chunk with the bytes received so far and the state's size from the header. */
  readonly onProgress?: (receivedBytes: number, totalBytes: number) => void
  /**
   * Arrays of the expected layout to write the state into, in place, instead of new ones: no second
   * copy of a large state in memory (a failed download leaves them partly written: the caller's to clear).
   */
  readonly into?: readonly Float32Array[]
}

const DEFAULT_MIN_BYTES_PER_SECOND = 1024 * 1024

/** Frames a download reads: the header is the largest, chunks are checked against their own bound. */
const DOWNLOAD_FRAME_BOUNDS = { maxFrameBytes: MAX_HEADER_FRAME_BYTES, maxQueuedFrames: 32 } as const

/** A libp2p stream to the donor's state protocol. */
export async function openStateStream (node: SwarmNode, donor: string, protocol: string, timeoutMs: number): Promise<FrameChannel> {
  return await openFramed(node, peerIdFromString(donor), protocol, { timeoutMs, ...DOWNLOAD_FRAME_BOUNDS })
}

/** What dialling a donor's direct data channel takes: our certificate and where our sockets live. */
export interface DirectDialer {
  readonly identity: DataChannelIdentity
  readonly transport: DirectTransport
}

/**
 * The donor's direct data channel, tried at the hosts we know for it (directEndpointsOf's order: the
 * same as the all-reduce's); throws when none answers, and the caller takes a libp2p stream. The
 * donor admits only peers with a libp2p connection to it (its private network and allow list
 * live there), so that is made first.
 */
export async function openDirectState (node: SwarmNode, donor: string, at: { port: number, dataAddrs: readonly DataEndpoint[] }, protocols: readonly string[], dialer: DirectDialer, timeoutMs: number): Promise<FrameChannel> {
  const peer = peerIdFromString(donor)
  await node.dial(peer, { signal: AbortSignal.timeout(timeoutMs) })
  const failures: string[] = []
  for (const { host, port } of await directEndpointsOf(node, peer, at.port, at.dataAddrs)) {
    try {
      return await dialer.transport.dial({ identity: dialer.identity, host, port, protocols, expectedPeer: peer, timeoutMs: Math.min(timeoutMs, 5000), ...DOWNLOAD_FRAME_BOUNDS })
    } catch (err) {
      failures.push(`${host}:${port}: ${describeError(err)}`)
    }
  }
  throw new ProtocolError(failures.length === 0 ? `no address of ${donor} to reach its data channel at` : failures.join('; '))
}

/**
 * Downloads the state from one donor over an open channel (a libp2p stream or the direct data
 * channel), or 'busy' when it serves its limit already. Everything
 * from the wire is checked before it is used: the header before any allocation, every chunk's
 * place and size before it is copied, values for finiteness; each frame must arrive within the
 * request timeout. Throws ProtocolError or TimeoutError when the donor misbehaves.
 */
export async function downloadFrom (framed: FrameChannel, donor: string, options: DownloadFromOptions): Promise<DownloadedState | 'busy'> {
  try {
    await framed.write(StateRequest.encode({}))
    const headerFrame = await framed.read(options.requestTimeoutMs)
    if (headerFrame == null) throw new ProtocolError(`donor ${donor} closed the stream without sending its state`)
    const header = decode(() => StateHeader.decode(headerFrame), 'header')
    if (header.busy) return 'busy'
    const layout = validateHeader(header, options.expected, options.maxStateBytes)
    const into = options.into
    if (into !== undefined && (into.length !== layout.tensors.length || into.some((a, i) => a.length !== layout.tensors[i].elements))) {
      throw new AveragingError('the arrays to download into do not have the expected layout')
    }
    const arrays = into ?? layout.tensors.map(t => new Float32Array(t.elements))
    let received = 0
    const deadline = Date.now() + 2 * options.requestTimeoutMs + 1000 * layout.totalBytes / (options.minBytesPerSecond ?? DEFAULT_MIN_BYTES_PER_SECOND)
    const nextWait = (): number => {
      const left = deadline - Date.now()
      if (left <= 0) throw new TimeoutError(`donor ${donor} sent ${layout.totalBytes} bytes too slowly`)
      return Math.min(options.requestTimeoutMs, left)
    }
    for (const [index, tensor] of layout.tensors.entries()) {
      const target = new Uint8Array(arrays[index].buffer, arrays[index].byteOffset, arrays[index].byteLength)
      let offset = 0
      while (offset < tensor.elements) {
        const frame = await framed.readPieces(nextWait())
        if (frame == null) throw new ProtocolError(`donor ${donor} ended the stream at element ${offset} of tensor ${tensor.name}`)
        if (frame.byteLength > MAX_CHUNK_FRAME_BYTES) throw new ProtocolError(`donor ${donor} sent a ${frame.byteLength}-byte chunk, above the ${MAX_CHUNK_FRAME_BYTES}-byte bound`)
        const chunk = chunkView(frame) ?? decode(() => wholeChunk(frame), 'chunk')
        if (chunk.tensorIndex !== index || chunk.offset !== offset) {
          throw new ProtocolError(`donor ${donor} sent a chunk for tensor ${chunk.tensorIndex} at ${chunk.offset} where tensor ${index} at ${offset} was next`)
        }
        const bytes = chunk.data.byteLength
        if (bytes === 0 || bytes % 4 !== 0 || bytes > CHUNK_BYTES || offset + bytes / 4 > tensor.elements) {
          throw new ProtocolError(`donor ${donor} sent a ${bytes}-byte chunk that does not fit tensor ${tensor.name} at element ${offset}`)
        }
        const count = bytes / 4
        // One copy, from the transport's pieces into the tensor.
        let at = offset * 4
        for (const piece of chunk.data) { target.set(piece, at); at += piece.byteLength }
        framed.release?.(frame)
        if (!allFinite(arrays[index].subarray(offset, offset + count))) throw new ProtocolError(`donor ${donor} sent a non-finite value in tensor ${tensor.name}`)
        offset += count
        received += bytes
        options.onProgress?.(received, layout.totalBytes)
      }
    }
    const trailing = await framed.read(nextWait())
    if (trailing != null) throw new ProtocolError(`donor ${donor} sent more data than its header announced`)
    return {
      tensors: layout.tensors.map((t, i) => ({ name: t.name, shape: t.shape, data: arrays[i] })),
      metadata: layout.metadata
    }
  } catch (err) {
    framed.abort(err instanceof Error ? err : new ProtocolError(describeError(err)))
    throw err
  } finally {
    await framed.closeWrite()
  }
}

/**
 * Its own small function: inlined in downloadFrom's loop, inside an async function, V8 ran this
 * check at ~15 ns a value (a 4 GB state: 15 s of the newcomer's CPU); alone, ~1.7 ns.
 */
function allFinite (values: Float32Array): boolean {
  for (let i = 0; i < values.length; i++) if (!Number.isFinite(values[i])) return false
  return true
}

/** A chunk not laid out as our donors write it: decoded whole, as protobuf allows. */
function wholeChunk (frame: Uint8ArrayList): ChunkView {
  const chunk = StateChunk.decode(frame.subarray())
  return { tensorIndex: chunk.tensorIndex, offset: chunk.offset, data: new Uint8ArrayList(chunk.data) }
}

function decode<T> (fn: () => T, what: string): T {
  try {
    return fn()
  } catch {
    throw new ProtocolError(`the donor sent a state ${what} that is not a valid message`)
  }
}
