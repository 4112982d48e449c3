import { elementCount } from '../schema.js'
import { ProtocolError } from '../errors.js'
import { StateChunk, type StateHeader } from '../proto/averaging.js'
import type { Uint8ArrayList } from 'uint8arraylist'

/** One protocol per swarm prefix, like the other averaging protocols. */
export function stateProtocol (prefix: string): string {
  return `/avs/${prefix}/state/1.0.0`
}

/**
 * The same exchange over the direct data channel (TLS ALPN ids, the preferred first): a state is
 * gigabytes, which libp2p's Noise and yamux in JavaScript carry at ~8 CPU s per GB on each side.
 */
export function directStateProtocols (prefix: string): string[] {
  return [`/avs/${prefix}/state-direct/1.0.0`]
}

/** Rendezvous key under which donors announce themselves (hivemind's "{prefix}.all_averagers"). */
export function donorKey (prefix: string): string {
  return `${prefix}.state`
}

/** float32 payload bytes per StateChunk, hivemind's 64 KiB chunks. */
export const CHUNK_BYTES = 64 * 1024
/** A chunk frame: the payload plus protobuf field overhead. */
export const MAX_CHUNK_FRAME_BYTES = CHUNK_BYTES + 64
/** The header frame: metadata JSON plus names and shapes. */
export const MAX_HEADER_FRAME_BYTES = 1024 * 1024
export const MAX_REQUEST_FRAME_BYTES = 64
/** Concurrent state requests one peer may have served by a donor, over all its connections. */
export const MAX_STATE_STREAMS_PER_PEER = 2
/**
 * libp2p's per-connection bound, which counts streams until both sides closed them: a newcomer
 * retrying a busy donor at once still has its last stream counted, so this is looser.
 */
export const MAX_STATE_STREAMS_PER_CONNECTION = 8
export const MAX_TENSORS = 4096
export const MAX_DIMS = 16
export const MAX_NAME_LENGTH = 512
/** Bound on the total float32 bytes a download may allocate when no expected layout is given (with one, its own size bounds it). */
export const DEFAULT_MAX_STATE_BYTES = 2 * 1024 * 1024 * 1024

export interface ExpectedTensor {
  readonly name: string
  readonly shape: readonly number[]
}

export interface ValidatedLayout {
  readonly tensors: ReadonlyArray<{ readonly name: string, readonly shape: number[], readonly elements: number }>
  readonly metadata: Record<string, unknown>
  readonly totalBytes: number
}

/**
 * Checks a donor's header before anything is allocated for it: tensor count, names, shapes
 * (against `expected` when given), element counts and the total size. Throws ProtocolError with
 * a sentence naming what was wrong. maxStateBytes bounds a layout not known in advance only.
 */
export function validateHeader (header: StateHeader, expected: readonly ExpectedTensor[] | undefined, maxStateBytes: number): ValidatedLayout {
  if (header.tensors.length > MAX_TENSORS) throw new ProtocolError(`the donor announced ${header.tensors.length} tensors, above the ${MAX_TENSORS} bound`)
  if (expected != null && header.tensors.length !== expected.length) {
    throw new ProtocolError(`the donor announced ${header.tensors.length} tensors where ${expected.length} were expected`)
  }
  const tensors: Array<{ name: string, shape: number[], elements: number }> = []
  let totalBytes = 0
  for (const [i, meta] of header.tensors.entries()) {
    if (meta.name.length > MAX_NAME_LENGTH) throw new ProtocolError(`the donor announced tensor ${i} with a name longer than ${MAX_NAME_LENGTH} characters`)
    if (meta.shape.length > MAX_DIMS) throw new ProtocolError(`the donor announced tensor ${meta.name} with ${meta.shape.length} dimensions, above the ${MAX_DIMS} bound`)
    const shape = [...meta.shape]
    if (shape.some(d => !Number.isSafeInteger(d) || d < 0)) throw new ProtocolError(`the donor announced tensor ${meta.name} with an invalid shape`)
    const want = expected?.[i]
    if (want != null && (want.name !== meta.name || !sameShape(want.shape, shape))) {
      throw new ProtocolError(`the donor announced tensor ${i} as ${meta.name} [${shape.join(', ')}] where ${want.name} [${want.shape.join(', ')}] was expected`)
    }
    // Multiply in floating point: an absurd shape overflows to a huge number, caught by the bound below.
    const elements = elementCount(shape)
    totalBytes += elements * 4
    // With an expected layout the shapes are our own (checked above), so their size is what this
    // process already holds: a 1B-parameter model's 4 GB must not meet the bound for unknown layouts.
    if (expected == null && !(totalBytes <= maxStateBytes)) throw new ProtocolError(`the donor announced more than ${maxStateBytes} bytes of tensors`)
    tensors.push({ name: meta.name, shape, elements })
  }
  return { tensors, metadata: parseMetadata(header.metadata), totalBytes }
}

function sameShape (a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i])
}

function parseMetadata (bytes: Uint8Array): Record<string, unknown> {
  let value: unknown
  try {
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes))
  } catch {
    throw new ProtocolError('the donor sent metadata that is not valid JSON')
  }
  if (value == null || typeof value !== 'object' || Array.isArray(value)) throw new ProtocolError('the donor sent metadata that is not a JSON object')
  return value as Record<string, unknown>
}

/** Tags of StateChunk's fields: tensor_index and offset (varints), data (length-delimited). */
const INDEX_TAG = (1 << 3) | 0
const OFFSET_TAG = (2 << 3) | 0
const DATA_TAG = (3 << 3) | 2

/**
 * A StateChunk's bytes before its data (the index and offset fields, the data's tag and length):
 * followed by the data, the very bytes StateChunk.encode writes for the whole message.
 */
export function chunkHead (tensorIndex: number, offset: number, dataBytes: number): Uint8Array {
  const fields = StateChunk.encode({ tensorIndex, offset })
  const length: number[] = []
  for (let n = dataBytes; ; n = Math.floor(n / 128)) {
    if (n < 128) { length.push(n); break }
    length.push((n % 128) | 128)
  }
  const head = new Uint8Array(fields.byteLength + 1 + length.length)
  head.set(fields)
  head[fields.byteLength] = DATA_TAG
  head.set(length, fields.byteLength + 1)
  return head
}

/** A chunk as read: its data a view of the frame's pieces, not joined into one array. */
export interface ChunkView {
  readonly tensorIndex: number
  readonly offset: number
  readonly data: Uint8ArrayList
}

/**
 * A chunk's fields straight from its frame's pieces (the head is at most 16 bytes; the data stays
 * where the transport put it, for the caller to copy once into the tensor): a 64 KiB array joined
 * per chunk was most of a newcomer's garbage. Null when the frame is not laid out as chunkHead
 * writes it (fields in order, data last and to the end): the caller then decodes it whole.
 */
export function chunkView (frame: Uint8ArrayList): ChunkView | null {
  const head = frame.subarray(0, Math.min(frame.byteLength, 16))
  let at = 0
  const varint = (): number => {
    let value = 0
    for (let scale = 1, i = 0; i < 5 && at < head.length; i++, scale *= 128) {
      const b = head[at++]
      value += (b & 127) * scale
      if (b < 128) return value
    }
    return -1
  }
  let tensorIndex = 0
  let offset = 0
  if (head[at] === INDEX_TAG) { at++; tensorIndex = varint() }
  if (head[at] === OFFSET_TAG) { at++; offset = varint() }
  if (head[at] !== DATA_TAG) return null
  at++
  const length = varint()
  if (tensorIndex < 0 || offset < 0 || length < 0 || at + length !== frame.byteLength) return null
  return { tensorIndex, offset, data: frame.sublist(at) }
}
