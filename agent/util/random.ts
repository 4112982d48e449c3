import { createHash } from 'node:crypto'

/** A deterministic PRNG (xoshiro128**) seeded from bytes: every group member derives the same sequence from the group id. */
export function seededRandom (seed: Uint8Array): () => number {
  const h = createHash('sha256').update(seed).digest()
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
