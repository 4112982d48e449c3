import { type Codec, CodecError, checkCount, checkLength, readFloat32s } from './types.js'

/**
 * 'uniform8bit': hivemind's UNIFORM_8BIT idea, with our own (simpler) layout.
 *
 * Layout (little-endian), encodedLength(n) = 1024 + n:
 *   bytes [0, 1024)        float32[256] codebook
 *   bytes [1024, 1024 + n) uint8[n] indices; value i decodes to codebook[indices[i]]
 *
 * Encoding: centre by the mean, bin width scale = 6·std/256 (unbiased std), index = round((x − mean)/scale) + 128
 * clamped to [0, 255]. A codebook entry is the mean of the original values that fell in its bin (better than the bin
 * centre); an empty bin gets its centre, clamped to [min, max] of the input so it can never overflow float32.
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
    let min = Infinity
    let max = -Infinity
    for (let i = 0; i < n; i++) {
      const x = values[i]
      sum += x
      if (x < min) min = x
      if (x > max) max = x
    }
    // A float32 sum in double cannot overflow, so a non-finite sum means a NaN or infinite input.
    if (!Number.isFinite(sum)) throw new CodecError('uniform8bit codec: cannot quantise NaN or infinite values.')
    if (n === 0) { min = 0; max = 0 }
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
    const binSum = new Float64Array(CODEBOOK_SIZE)
    const binCount = new Float64Array(CODEBOOK_SIZE)
    if (scale > 0) {
      const inverse = 1 / scale
      for (let i = 0; i < n; i++) {
        const x = values[i]
        let k = Math.round((x - mean) * inverse) + CENTRE
        if (k < 0) k = 0
        else if (k > 255) k = 255
        indices[i] = k
        binSum[k] += x
        binCount[k]++
      }
    } else {
      indices.fill(CENTRE)
      binSum[CENTRE] = sum
      binCount[CENTRE] = n
    }
    for (let k = 0; k < CODEBOOK_SIZE; k++) {
      if (binCount[k] > 0) {
        codebook[k] = binSum[k] / binCount[k]
      } else {
        const centre = mean + (k - CENTRE) * scale
        codebook[k] = centre < min ? min : centre > max ? max : centre
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
