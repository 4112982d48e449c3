import { type Codec, CodecError, checkCount, checkLength, readFloat32s } from './types.js'
import {
  BUCKET_BASE, BUCKET_NEEDS_SEARCH, BUCKET_THRESHOLD, DYNAMIC_MAP, DYNAMIC_MAP_ZERO_INDEX, nearestCode
} from './dynamic-map.js'

/**
 * 'blockwise8bit': bitsandbytes-style blockwise dynamic quantisation with our own layout.
 *
 * Layout (little-endian), nBlocks = ceil(n / 4096), encodedLength(n) = 4·nBlocks + n:
 *   bytes [0, 4·nBlocks)          float32[nBlocks] absmax, one per block of 4096 values (the last may be shorter)
 *   bytes [4·nBlocks, 4·nBlocks+n) uint8[n] indices into DYNAMIC_MAP
 * Value i decodes to DYNAMIC_MAP[indices[i]] · absmax[floor(i / 4096)].
 *
 * Each value is divided by its block's absmax (the quotient rounded to float32) and mapped to the nearest code. A block of zeros has absmax 0 and
 * decodes to zeros. An absmax that is negative, NaN or infinite is invalid content (CodecError).
 * NaN or infinite input cannot be quantised and throws CodecError.
 */

export const BLOCK_SIZE = 4096

function blockCount (n: number): number {
  return Math.ceil(n / BLOCK_SIZE)
}

export const blockwise8bitCodec: Codec = Object.freeze({
  name: 'blockwise8bit',
  bytesPerElement: 1,
  encodedLength (n: number): number {
    checkCount('blockwise8bit', n)
    return 4 * blockCount(n) + n
  },
  encode (values: Float32Array): Uint8Array {
    const n = values.length
    const nBlocks = blockCount(n)
    const out = new Uint8Array(4 * nBlocks + n)
    const absmaxes = new Float32Array(out.buffer, 0, nBlocks)
    const indices = out.subarray(4 * nBlocks)
    const scratch = new Float32Array(BLOCK_SIZE)
    const scratchBits = new Uint32Array(scratch.buffer)
    for (let b = 0; b < nBlocks; b++) {
      const start = b * BLOCK_SIZE
      const end = Math.min(n, start + BLOCK_SIZE)
      let absmax = 0
      for (let i = start; i < end; i++) {
        const a = Math.abs(values[i])
        if (!(a <= absmax)) {
          if (Number.isNaN(a)) throw new CodecError('blockwise8bit codec: cannot quantise NaN values.')
          absmax = a
        }
      }
      if (absmax === Infinity) throw new CodecError('blockwise8bit codec: cannot quantise infinite values.')
      absmaxes[b] = absmax
      if (absmax === 0) {
        indices.fill(DYNAMIC_MAP_ZERO_INDEX, start, end)
        continue
      }
      // Normalise into a float32 scratch block and look codes up by the float32 bit pattern (see dynamic-map.ts).
      const inverse = 1 / absmax
      const length = end - start
      for (let i = 0; i < length; i++) scratch[i] = values[start + i] * inverse
      for (let i = 0; i < length; i++) {
        const key = scratchBits[i] >>> 16
        indices[start + i] = BUCKET_NEEDS_SEARCH[key] === 0
          ? BUCKET_BASE[key] + (scratch[i] > BUCKET_THRESHOLD[key] ? 1 : 0)
          : nearestCode(scratch[i])
      }
    }
    return out
  },
  decode (bytes: Uint8Array, n: number): Float32Array {
    checkCount('blockwise8bit', n)
    const nBlocks = blockCount(n)
    checkLength('blockwise8bit', bytes, n, 4 * nBlocks + n)
    const absmaxes = readFloat32s(bytes, 0, nBlocks)
    for (let b = 0; b < nBlocks; b++) {
      const a = absmaxes[b]
      if (!(Number.isFinite(a) && a >= 0)) {
        throw new CodecError(`blockwise8bit codec: block ${b} has absmax ${a}, which is not a finite non-negative number.`)
      }
    }
    const indices = bytes.subarray(4 * nBlocks)
    const code = DYNAMIC_MAP
    const out = new Float32Array(n)
    for (let b = 0; b < nBlocks; b++) {
      const start = b * BLOCK_SIZE
      const end = Math.min(n, start + BLOCK_SIZE)
      const absmax = absmaxes[b]
      for (let i = start; i < end; i++) out[i] = code[indices[i]] * absmax
    }
    return out
  }
})
