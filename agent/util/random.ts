import { createHash } from 'node:crypto'

/**
 * The project's one seeded PRNG (xoshiro128**), uniform in [0, 1): every group member derives the
 * same sequence from the group id, and a benchmark or test repeats exactly from its seed. A
 * string seed stands for its UTF-8 bytes, a number for its decimal spelling.
 */
export function seededRandom (seed: Uint8Array | string | number): () => number {
  const bytes = typeof seed === 'string' || typeof seed === 'number' ? new TextEncoder().encode(String(seed)) : seed
  const h = createHash('sha256').update(bytes).digest()
  let a = h.readUInt32LE(0) | 0; let b = h.readUInt32LE(4) | 0; let c = h.readUInt32LE(8) | 0; let d = h.readUInt32LE(12) | 0
  if ((a | b | c | d) === 0) a = 1
  return () => {
    const result = Math.imul(rotl(Math.imul(b, 5), 7), 9) >>> 0
    const t = b << 9
    c ^= a; d ^= b; b ^= c; a ^= d; c ^= t; d = rotl(d, 11)
    return result / 4294967296
  }
}

function rotl (x: number, k: number): number {
  return (x << k) | (x >>> (32 - k))
}

/** Fisher-Yates shuffle with the given random source (Math.random when omitted). */
export function shuffle<T> (items: readonly T[], random: () => number = Math.random): T[] {
  const out = [...items]
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1))
    const tmp = out[i]; out[i] = out[j]; out[j] = tmp
  }
  return out
}

/** n normal float32 values (Box-Muller) times sigma plus mu, from a seeded sequence. */
export function normalArray (n: number, seed: Uint8Array | string | number, mu = 0, sigma = 1): Float32Array {
  const random = seededRandom(seed)
  const out = new Float32Array(n)
  for (let i = 0; i < n; i += 2) {
    const r = Math.sqrt(-2 * Math.log(1 - random()))
    const theta = 2 * Math.PI * random()
    out[i] = mu + sigma * r * Math.cos(theta)
    if (i + 1 < n) out[i + 1] = mu + sigma * r * Math.sin(theta)
  }
  return out
}
