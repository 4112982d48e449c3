/** Helpers for the codec tests; their seeded data comes from the one PRNG (agent/util/random.ts). */
export { seededRandom, normalArray } from '../../../agent/util/random.js'

/** sqrt(Σ(x − y)²) / sqrt(Σx²). */
export function relativeRmse (original: Float32Array, decoded: Float32Array): number {
  let err = 0
  let ref = 0
  for (let i = 0; i < original.length; i++) {
    const d = original[i] - decoded[i]
    err += d * d
    ref += original[i] * original[i]
  }
  return Math.sqrt(err / ref)
}

/** A copy of bytes placed at the given byteOffset of a larger buffer (to test unaligned decoding). */
export function atOffset (bytes: Uint8Array, byteOffset: number): Uint8Array {
  const buffer = new Uint8Array(bytes.length + byteOffset)
  buffer.set(bytes, byteOffset)
  return buffer.subarray(byteOffset)
}
