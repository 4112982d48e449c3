import type { Uint8ArrayList } from 'uint8arraylist'
import { type Codec, CodecError, checkCount, checkLength } from './types.js'

/**
 * 'float16': IEEE 754 binary16, little-endian, 2 bytes per value.
 * Encoding rounds to nearest, ties to even, clamps finite and infinite values to ±65504 (hivemind's rule, so a large
 * value degrades instead of becoming Inf) and keeps NaN as a quiet NaN. Node 22 has no Float16Array, so the
 * conversion is done on the float32 bit patterns; decoding is one lookup in a 65536-entry table built on first use.
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
    if (abs > F32_HALF_MAX) return sign | (abs > F32_INF ? HALF_QUIET_NAN : HALF_MAX_BITS)
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

export const float16Codec: Codec = Object.freeze({
  name: 'float16',
  bytesPerElement: 2,
  encodedLength (n: number): number {
    checkCount('float16', n)
    return 2 * n
  },
  encode (values: Float32Array): Uint8Array {
    const out = new Uint16Array(values.length)
    encodeHalves(values, out)
    return new Uint8Array(out.buffer)
  },
  encodeInto (values: Float32Array, out: Uint8Array): Uint8Array {
    const bytes = 2 * values.length
    if (out.byteLength < bytes) throw new CodecError(`float16 codec: ${values.length} values need ${bytes} bytes, the output holds ${out.byteLength}.`)
    if (out.byteOffset % 2 !== 0) throw new CodecError('float16 codec: the output must be 2-byte aligned.')
    encodeHalves(values, new Uint16Array(out.buffer, out.byteOffset, values.length))
    return out.subarray(0, bytes)
  },
  decode (bytes: Uint8Array, n: number): Float32Array {
    checkCount('float16', n)
    checkLength('float16', bytes, n, 2 * n)
    const out = new Float32Array(n)
    decodeHalves(decodeTable ??= buildDecodeTable(), bytes, 0, n, out, 0)
    return out
  },
  decodeInto (bytes: Uint8Array, n: number, out: Float32Array): Float32Array {
    checkCount('float16', n)
    checkLength('float16', bytes, n, 2 * n)
    decodeHalves(decodeTable ??= buildDecodeTable(), bytes, 0, n, out, 0)
    return out.subarray(0, n)
  },
  decodePiecesInto (pieces: Uint8ArrayList, n: number, out: Float32Array): Float32Array {
    checkCount('float16', n)
    if (pieces.byteLength !== 2 * n) throw new CodecError(`float16 codec: ${n} values need ${2 * n} encoded bytes, got ${pieces.byteLength}.`)
    const table = decodeTable ??= buildDecodeTable()
    // A value may straddle two chunks: its first byte waits in `low` for the next chunk's first.
    let at = 0
    let low = -1
    for (const chunk of pieces) {
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
    return out.subarray(0, n)
  }
})
