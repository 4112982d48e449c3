import { type Codec, CodecError, checkCount, checkLength, readFloat32s } from './types.js'

/**
 * 'uniform8bit': hivemind's UNIFORM_8BIT idea, with our own (simpler) layout.
 *
 * Layout (little-endian), encodedLength(n) = 1024 + n:
 *   bytes [0, 1024)        float32[256] codebook
 *   bytes [1024, 1024 + n) uint8[n] indices; value i decodes to codebook[indices[i]]
 *
 * Encoding: centre by the mean, bin width scale = 6·std/256 (unbiased std), index = round((x − mean)/scale) + 128
 * clamped to [0, 255] (ties to even). A codebook entry is the mean of the original values that fell in its bin (better
 * than the bin centre); an empty bin gets its centre, clamped between the lowest and highest occupied bins' means, so
 * the codebook is monotone and can never overflow float32.
 * All-equal input (std = 0) puts every value in bin 128 whose entry is that value, so it round-trips exactly.
 * NaN or infinite input cannot be quantised and throws CodecError.
 */

const CODEBOOK_SIZE = 256
const HEADER_BYTES = CODEBOOK_SIZE * 4
const CENTRE = 128

export const uniform8bitCodec: Codec = Object.freeze({
  name: 'uniform8bit',
  bytesPerElement: 1,
  encodedLength (n: number): number {
    checkCount('uniform8bit', n)
    return HEADER_BYTES + n
  },
  encode (values: Float32Array): Uint8Array {
    const n = values.length
    let sum = 0
    for (let i = 0; i < n; i++) sum += values[i]
    // A float32 sum in double cannot overflow, so a non-finite sum means a NaN or infinite input.
    if (!Number.isFinite(sum)) throw new CodecError('uniform8bit codec: cannot quantise NaN or infinite values.')
    const mean = n > 0 ? sum / n : 0
    let squares = 0
    for (let i = 0; i < n; i++) {
      const d = values[i] - mean
      squares += d * d
    }
    const std = n > 1 ? Math.sqrt(squares / (n - 1)) : 0
    const scale = 6 * std / CODEBOOK_SIZE

    const out = new Uint8Array(HEADER_BYTES + n)
    const codebook = new Float32Array(out.buffer, 0, CODEBOOK_SIZE)
    const indices = out.subarray(HEADER_BYTES)
    if (scale > 0) {
      // Storing into a Uint8ClampedArray clamps to [0, 255] and rounds half to even in one step, several times
      // faster than Math.round plus explicit clamping.
      const clamped = new Uint8ClampedArray(out.buffer, HEADER_BYTES, n)
      const inverse = 1 / scale
      const offset = CENTRE - mean * inverse
      for (let i = 0; i < n; i++) clamped[i] = values[i] * inverse + offset
    } else {
      indices.fill(CENTRE)
    }
    const binSum = new Float64Array(CODEBOOK_SIZE)
    const binCount = new Float64Array(CODEBOOK_SIZE)
    for (let i = 0; i < n; i++) {
      const k = indices[i]
      binSum[k] += values[i]
      binCount[k]++
    }
    // Occupied bins hold bin means; empty bins get their centre, clamped between the outermost occupied bins' means
    // so the codebook stays monotone and finite even for inputs near the float32 limit.
    let lowest = 0
    let highest = 0
    for (let k = 0; k < CODEBOOK_SIZE; k++) {
      if (binCount[k] > 0) {
        codebook[k] = binSum[k] / binCount[k]
        if (binCount[lowest] === 0) lowest = k
        highest = k
      }
    }
    const low = binCount[lowest] > 0 ? codebook[lowest] : 0
    const high = binCount[highest] > 0 ? codebook[highest] : 0
    for (let k = 0; k < CODEBOOK_SIZE; k++) {
      if (binCount[k] === 0) {
        const centre = mean + (k - CENTRE) * scale
        codebook[k] = centre < low ? low : centre > high ? high : centre
      }
    }
    return out
  },
  decode (bytes: Uint8Array, n: number): Float32Array {
    checkCount('uniform8bit', n)
    checkLength('uniform8bit', bytes, n, HEADER_BYTES + n)
    const codebook = readFloat32s(bytes, 0, CODEBOOK_SIZE)
    for (let k = 0; k < CODEBOOK_SIZE; k++) {
      if (!Number.isFinite(codebook[k])) {
        throw new CodecError(`uniform8bit codec: codebook entry ${k} is not a finite number.`)
      }
    }
    const indices = bytes.subarray(HEADER_BYTES)
    const out = new Float32Array(n)
    for (let i = 0; i < n; i++) out[i] = codebook[indices[i]]
    return out
  }
})
