import type { Uint8ArrayList } from 'uint8arraylist'
import { type Codec, CodecError, checkCount, checkLength } from './types.js'
import { createHalfKernels, type HalfKernels } from '../kernels/half-kernels.js'

/**
 * 'float16': IEEE 754 binary16, little-endian, 2 bytes per value.
 * Encoding rounds to nearest, ties to even, clamps finite and infinite values to ±65504 (hivemind's rule, so a large
 * value degrades instead of becoming Inf) and keeps NaN as a quiet NaN. The conversions run in WebAssembly SIMD
 * (kernels/half-kernels.ts); the JavaScript here is their twin where a runtime has none: Node 22 has no
 * Float16Array, so it works on the float32 bit patterns, and decodes by one lookup in a 65536-entry table.
 */

const HALF_MAX_BITS = 0x7bff // 65504
const HALF_QUIET_NAN = 0x7e00
const F32_HALF_MAX = 0x477fe000 // 65504 as float32 bits
const F32_INF = 0x7f800000
const F32_MIN_HALF_NORMAL = 0x38800000 // 2^-14 as float32 bits
/** Subtracting this rebiases the exponent from 127 to 15; adding 0xfff then rounds the 13 dropped bits half-down. */
const REBIAS_AND_ROUND = ((127 - 15) << 23) - 0xfff
const TWO_POW_24 = 16777216

/** float32 bits (as uint32) of one value → binary16 bits. Exported for tests. */
export function halfBitsFromFloatBits (bits: number, value: number): number {
  const sign = (bits >>> 16) & 0x8000
  const abs = bits & 0x7fffffff
  if (abs >= F32_MIN_HALF_NORMAL) {
    // A NaN keeps its sign and the top of its payload, made quiet (as reduce.wat's narrow does).
    if (abs > F32_HALF_MAX) return sign | (abs > F32_INF ? HALF_QUIET_NAN | ((abs >>> 13) & 0x3ff) : HALF_MAX_BITS)
    // Round to nearest even on the 13 dropped mantissa bits: add 0xfff plus the lowest kept bit, then shift.
    // A carry out of the mantissa correctly bumps the exponent; abs <= 65504 keeps the result finite.
    return sign | (((abs - REBIAS_AND_ROUND + ((abs >>> 13) & 1)) >>> 13) & 0x7fff)
  }
  // Subnormal half (or zero): the value in units of 2^-24, rounded to nearest even. Exact in double arithmetic.
  const scaled = Math.abs(value) * TWO_POW_24
  let r = Math.round(scaled) // rounds halves up
  if (r - scaled === 0.5 && (r & 1) === 1) r -= 1
  return sign | r
}

let decodeTable: Float32Array | undefined

/** binary16 bits → float32 value, for all 65536 patterns. */
function buildDecodeTable (): Float32Array {
  const table = new Float32Array(65536)
  for (let h = 0; h < 65536; h++) {
    const sign = (h & 0x8000) !== 0 ? -1 : 1
    const exponent = (h >>> 10) & 0x1f
    const mantissa = h & 0x3ff
    let v: number
    if (exponent === 0) v = mantissa * 2 ** -24
    else if (exponent === 31) v = mantissa === 0 ? Infinity : NaN
    else v = (1 + mantissa / 1024) * 2 ** (exponent - 15)
    table[h] = sign * v
  }
  return table
}

/** values → binary16 bits in out[0, n). */
function encodeHalves (values: Float32Array, out: Uint16Array): void {
  const n = values.length
  const bits = new Uint32Array(values.buffer, values.byteOffset, n)
  for (let i = 0; i < n; i++) {
    const b = bits[i]
    const abs = b & 0x7fffffff
    // Fast path for the common case (normal half range), inlined; everything else goes through the helper.
    if (abs >= F32_MIN_HALF_NORMAL && abs <= F32_HALF_MAX) {
      out[i] = ((b >>> 16) & 0x8000) | (((abs - REBIAS_AND_ROUND + ((abs >>> 13) & 1)) >>> 13) & 0x7fff)
    } else {
      out[i] = halfBitsFromFloatBits(b, values[i])
    }
  }
}

/**
 * out[at, at + count) = the values of the count halves in bytes from byte `from` on. Any alignment:
 * a 2-byte aligned run is read as Uint16Array, anything else byte by byte (little-endian).
 */
function decodeHalves (table: Float32Array, bytes: Uint8Array, from: number, count: number, out: Float32Array, at: number): void {
  if ((bytes.byteOffset + from) % 2 === 0) {
    const halves = new Uint16Array(bytes.buffer, bytes.byteOffset + from, count)
    for (let i = 0; i < count; i++) out[at + i] = table[halves[i]]
    return
  }
  for (let i = 0; i < count; i++) out[at + i] = table[bytes[from + 2 * i] | (bytes[from + 2 * i + 1] << 8)]
}

/**
 * The float16 codec, its conversions done by `half` where it gives kernels (WebAssembly SIMD), else
 * by the JavaScript above: both give the same bits for every input. Exported for tests of each.
 */
export function makeFloat16Codec (half: () => HalfKernels | null): Codec {
  return Object.freeze({
    name: 'float16',
    bytesPerElement: 2,
    encodedLength (n: number): number {
      checkCount('float16', n)
      return 2 * n
    },
    encode (values: Float32Array): Uint8Array {
      const out = new Uint8Array(2 * values.length)
      encodeTo(half(), values, out)
      return out
    },
    encodeInto (values: Float32Array, out: Uint8Array): Uint8Array {
      const bytes = 2 * values.length
      if (out.byteLength < bytes) throw new CodecError(`float16 codec: ${values.length} values need ${bytes} bytes, the output holds ${out.byteLength}.`)
      if (out.byteOffset % 2 !== 0) throw new CodecError('float16 codec: the output must be 2-byte aligned.')
      encodeTo(half(), values, out)
      return out.subarray(0, bytes)
    },
    decode (bytes: Uint8Array, n: number): Float32Array {
      checkCount('float16', n)
      checkLength('float16', bytes, n, 2 * n)
      const out = new Float32Array(n)
      decodeFrom(half(), [bytes], n, out)
      return out
    },
    decodeInto (bytes: Uint8Array, n: number, out: Float32Array): Float32Array {
      checkCount('float16', n)
      checkLength('float16', bytes, n, 2 * n)
      decodeFrom(half(), [bytes], n, out)
      return out.subarray(0, n)
    },
    decodePiecesInto (pieces: Uint8ArrayList, n: number, out: Float32Array): Float32Array {
      checkCount('float16', n)
      if (pieces.byteLength !== 2 * n) throw new CodecError(`float16 codec: ${n} values need ${2 * n} encoded bytes, got ${pieces.byteLength}.`)
      decodeFrom(half(), pieces, n, out)
      return out.subarray(0, n)
    }
  })
}

function encodeTo (half: HalfKernels | null, values: Float32Array, out: Uint8Array): void {
  if (half !== null) half.encode(values, out)
  else encodeHalves(values, new Uint16Array(out.buffer, out.byteOffset, values.length))
}

/** out[0, n) from the chunks' 2n bytes, in order. */
function decodeFrom (half: HalfKernels | null, chunks: Iterable<Uint8Array>, n: number, out: Float32Array): void {
  if (half !== null) {
    half.decode(chunks, n, out)
    return
  }
  const table = decodeTable ??= buildDecodeTable()
  // A value may straddle two chunks: its first byte waits in `low` for the next chunk's first.
  let at = 0
  let low = -1
  for (const chunk of chunks) {
    let from = 0
    if (low >= 0 && chunk.byteLength > 0) {
      out[at++] = table[low | (chunk[0] << 8)]
      low = -1
      from = 1
    }
    const count = (chunk.byteLength - from) >>> 1
    decodeHalves(table, chunk, from, count, out, at)
    at += count
    from += 2 * count
    if (from < chunk.byteLength) low = chunk[from]
  }
}

let kernels: HalfKernels | null | undefined

/** The codec agents use: WebAssembly SIMD where the runtime has it, made on first use. */
export const float16Codec: Codec = makeFloat16Codec(() => kernels === undefined ? (kernels = createHalfKernels()) : kernels)
