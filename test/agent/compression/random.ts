/** Seeded PRNG helpers for the codec tests (deterministic, so a failure reproduces). */

/** mulberry32: uniform in [0, 1). */
export function mulberry32 (seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** n standard-normal float32 values (Box-Muller) times sigma plus mu. */
export function normalArray (n: number, seed: number, mu = 0, sigma = 1): Float32Array {
  const random = mulberry32(seed)
  const out = new Float32Array(n)
  for (let i = 0; i < n; i += 2) {
    const u = 1 - random()
    const v = random()
    const r = Math.sqrt(-2 * Math.log(u))
    out[i] = mu + sigma * r * Math.cos(2 * Math.PI * v)
    if (i + 1 < n) out[i + 1] = mu + sigma * r * Math.sin(2 * Math.PI * v)
  }
  return out
}

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
