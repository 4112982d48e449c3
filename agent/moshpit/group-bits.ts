import { seededRandom, shuffle } from '../util/random.js'

/** A group key is the prefix plus the Moshpit bits, as in hivemind: "<prefix>.0b<bits>". */
export function groupKey (prefix: string, bits: string): string {
  return `${prefix}.0b${bits}`
}

export function isGroupBits (bits: string): boolean {
  return /^[01]*$/.test(bits)
}

/**
 * The next round's bits (hivemind's Moshpit rule): every member draws a distinct bucket index
 * from a permutation seeded by the group id, and shifts it into its bits. Former group-mates
 * land in different buckets, so with N = g^d peers and d-1 index chunks the swarm holds the
 * exact global mean after d rounds.
 */
export function nextGroupBits (bits: string, groupId: Uint8Array, myIndex: number, groupSize: number, targetGroupSize: number): string {
  if (bits.length === 0) return bits
  const buckets = nextPowerOfTwo(Math.max(targetGroupSize, groupSize))
  const width = Math.log2(buckets)
  const permutation = shuffle(Array.from({ length: buckets }, (_, i) => i), seededRandom(groupId))
  const index = permutation[myIndex]
  const shifted = bits + index.toString(2).padStart(width, '0')
  return shifted.slice(-bits.length)
}

function nextPowerOfTwo (n: number): number {
  let p = 1
  while (p < n) p *= 2
  return p
}
