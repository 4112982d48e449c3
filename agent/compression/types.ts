import type { Uint8ArrayList } from 'uint8arraylist'
/**
 * The codec contract shared by every compression scheme used on the all-reduce wire.
 * Implementations live one per file next to this one; `codec.ts` maps names to them.
 */

export type CompressionName = 'none' | 'float16' | 'uniform8bit' | 'blockwise8bit'

/** What a config may ask for: a codec, or auto (none or float16 per round, agent/adapt/codec-choice.ts). */
export type CompressionChoice = CompressionName | 'auto'

export const COMPRESSION_NAMES: readonly CompressionName[] = Object.freeze(['none', 'float16', 'uniform8bit', 'blockwise8bit'])

/** Thrown on malformed input (wrong length, invalid scale, bad element count); the message is one clear sentence. */
export class CodecError extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'CodecError'
  }
}

export interface Codec {
  readonly name: CompressionName
  /** Nominal encoded bytes per element, used to size parts (4, 2, 1, 1). */
  readonly bytesPerElement: number
  /** Exact encoded length in bytes of n values. */
  encodedLength (n: number): number
  /** Encode values (never modifies the input). Output may be a view on a fresh buffer. */
  encode (values: Float32Array): Uint8Array
  /**
   * Optional: encode into `out` (at least encodedLength(n) bytes, 4-byte aligned) and return the
   * encoded view of it: the all-reduce's bulk path, into memory that comes back for reuse.
   */
  encodeInto?: (values: Float32Array, out: Uint8Array) => Uint8Array
  /**
   * Decode exactly n values; throws CodecError if bytes.length !== encodedLength(n) or the content is invalid
   * (e.g. NaN/Inf scale). The result is a fresh, 4-byte-aligned Float32Array (input bytes may have any byteOffset).
   */
  decode (bytes: Uint8Array, n: number): Float32Array
  /**
   * Optional: decode exactly n values into out[0..n) without allocating (the bulk path of the
   * all-reduce: ~1500 parts a round per 25M floats, each an allocation the GC would chase).
   */
  decodeInto?: (bytes: Uint8Array, n: number, out: Float32Array) => Float32Array
  /** decodeInto from the transport's chunks, without joining them first (optional). */
  decodePiecesInto?: (pieces: Uint8ArrayList, n: number, out: Float32Array) => Float32Array
}

/** Decodes into `out` (a reused buffer of at least n values) and returns the n-value view of it. */
export function decodeInto (codec: Codec, bytes: Uint8Array | Uint8ArrayList, n: number, out: Float32Array): Float32Array {
  if (out.length < n) throw new CodecError(`${codec.name} codec: output buffer holds ${out.length} values, ${n} needed.`)
  if (!(bytes instanceof Uint8Array)) {
    if (codec.decodePiecesInto != null) return codec.decodePiecesInto(bytes, n, out)
    bytes = bytes.subarray()
  }
  if (codec.decodeInto != null) return codec.decodeInto(bytes, n, out)
  const view = out.subarray(0, n)
  view.set(codec.decode(bytes, n))
  return view
}

export function isCompressionName (s: string): s is CompressionName {
  return (COMPRESSION_NAMES as readonly string[]).includes(s)
}

/** Throws CodecError unless n is a valid element count. */
export function checkCount (codec: CompressionName, n: number): void {
  if (!Number.isSafeInteger(n) || n < 0) {
    throw new CodecError(`${codec} codec: element count must be a non-negative integer, got ${String(n)}.`)
  }
}

/** Throws CodecError unless bytes has exactly the expected length; call before allocating anything for n. */
export function checkLength (codec: CompressionName, bytes: Uint8Array, n: number, expected: number): void {
  if (!(bytes instanceof Uint8Array)) {
    throw new CodecError(`${codec} codec: encoded data must be a Uint8Array.`)
  }
  if (bytes.length !== expected) {
    throw new CodecError(`${codec} codec: ${n} values need ${expected} encoded bytes, got ${bytes.length}.`)
  }
}

/**
 * Copies `count` float32 values stored little-endian at bytes[start..] into a fresh aligned array.
 * Works for any byteOffset (the wire gives no alignment guarantee).
 */
export function readFloat32s (bytes: Uint8Array, start: number, count: number): Float32Array {
  const out = new Float32Array(count)
  new Uint8Array(out.buffer).set(bytes.subarray(start, start + count * 4))
  return out
}

/** Every codec writes multi-byte numbers in host order through typed arrays, so the host must be little-endian. */
export const HOST_IS_LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1
