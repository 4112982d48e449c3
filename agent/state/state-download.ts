import { peerIdFromString } from '@libp2p/peer-id'
import type { SwarmNode } from '../net/node.js'
import type { NamedTensor } from '../averager.js'
import { openFramed } from '../net/rpc.js'
import { StateChunk, StateHeader, StateRequest } from '../proto/averaging.js'
import { ProtocolError, TimeoutError, describeError } from '../errors.js'
import { CHUNK_BYTES, MAX_CHUNK_FRAME_BYTES, MAX_HEADER_FRAME_BYTES, validateHeader, type ExpectedTensor } from './state-protocol.js'

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
}

const DEFAULT_MIN_BYTES_PER_SECOND = 1024 * 1024

/**
 * Downloads the state from one donor, or 'busy' when it serves its limit already. Everything
 * from the wire is checked before it is used: the header before any allocation, every chunk's
 * place and size before it is copied, values for finiteness; each frame must arrive within the
 * request timeout. Throws ProtocolError or TimeoutError when the donor misbehaves.
 */
export async function downloadFrom (node: SwarmNode, donor: string, protocol: string, options: DownloadFromOptions): Promise<DownloadedState | 'busy'> {
  const framed = await openFramed(node, peerIdFromString(donor), protocol, {
    timeoutMs: options.requestTimeoutMs,
    maxFrameBytes: MAX_HEADER_FRAME_BYTES,
    maxQueuedFrames: 32
  })
  try {
    await framed.write(StateRequest.encode({}))
    const headerFrame = await framed.read(options.requestTimeoutMs)
    if (headerFrame == null) throw new ProtocolError(`donor ${donor} closed the stream without sending its state`)
    const header = decode(() => StateHeader.decode(headerFrame), 'header')
    if (header.busy) return 'busy'
    const layout = validateHeader(header, options.expected, options.maxStateBytes)
    const arrays = layout.tensors.map(t => new Float32Array(t.elements))
    let received = 0
    const deadline = Date.now() + 2 * options.requestTimeoutMs + 1000 * layout.totalBytes / (options.minBytesPerSecond ?? DEFAULT_MIN_BYTES_PER_SECOND)
    const nextWait = (): number => {
      const left = deadline - Date.now()
      if (left <= 0) throw new TimeoutError(`donor ${donor} sent ${layout.totalBytes} bytes too slowly`)
      return Math.min(options.requestTimeoutMs, left)
    }
    for (const [index, tensor] of layout.tensors.entries()) {
      let offset = 0
      while (offset < tensor.elements) {
        const frame = await framed.read(nextWait())
        if (frame == null) throw new ProtocolError(`donor ${donor} ended the stream at element ${offset} of tensor ${tensor.name}`)
        if (frame.byteLength > MAX_CHUNK_FRAME_BYTES) throw new ProtocolError(`donor ${donor} sent a ${frame.byteLength}-byte chunk, above the ${MAX_CHUNK_FRAME_BYTES}-byte bound`)
        const chunk = decode(() => StateChunk.decode(frame), 'chunk')
        if (chunk.tensorIndex !== index || chunk.offset !== offset) {
          throw new ProtocolError(`donor ${donor} sent a chunk for tensor ${chunk.tensorIndex} at ${chunk.offset} where tensor ${index} at ${offset} was next`)
        }
        const bytes = chunk.data.byteLength
        if (bytes === 0 || bytes % 4 !== 0 || bytes > CHUNK_BYTES || offset + bytes / 4 > tensor.elements) {
          throw new ProtocolError(`donor ${donor} sent a ${bytes}-byte chunk that does not fit tensor ${tensor.name} at element ${offset}`)
        }
        const count = bytes / 4
        new Uint8Array(arrays[index].buffer, offset * 4, bytes).set(chunk.data)
        const values = arrays[index].subarray(offset, offset + count)
        for (let i = 0; i < count; i++) {
          if (!Number.isFinite(values[i])) throw new ProtocolError(`donor ${donor} sent a non-finite value in tensor ${tensor.name}`)
        }
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

function decode<T> (fn: () => T, what: string): T {
  try {
    return fn()
  } catch {
    throw new ProtocolError(`the donor sent a state ${what} that is not a valid message`)
  }
}
