import { type Codec, checkCount, checkLength } from './types.js'

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

export const float16Codec: Codec = Object.freeze({
  name: 'float16',
  bytesPerElement: 2,
  encodedLength (n: number): number {
    checkCount('float16', n)
    return 2 * n
  },
  encode (values: Float32Array): Uint8Array {
    const n = values.length
    const out = new Uint16Array(n)
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
    return new Uint8Array(out.buffer)
  },
  decode (bytes: Uint8Array, n: number): Float32Array {
    checkCount('float16', n)
    checkLength('float16', bytes, n, 2 * n)
    const table = decodeTable ??= buildDecodeTable()
    // Uint16Array needs 2-byte alignment; copy only when the wire buffer is misaligned. The copy is
    // made by the Uint8Array constructor: a node Buffer's slice() is a view of the same memory, and
    // its .buffer the whole (pooled or chunk) ArrayBuffer, so bytes.slice() would read other bytes.
    const halves = bytes.byteOffset % 2 === 0
      ? new Uint16Array(bytes.buffer, bytes.byteOffset, n)
      : new Uint16Array(new Uint8Array(bytes).buffer, 0, n)
    const out = new Float32Array(n)
    for (let i = 0; i < n; i++) out[i] = table[halves[i]]
    return out
  }
})
