import { elementCount } from '../schema.js'
import { ProtocolError } from '../errors.js'
import type { StateHeader } from '../proto/averaging.js'

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
