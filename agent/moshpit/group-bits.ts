import { seededRandom, shuffle } from '../util/random.js'

/** A group key is the prefix plus the Moshpit bits, as in hivemind: "<prefix>.0b<bits>". */
export function groupKey (prefix: string, bits: string): string {
  return `${prefix}.0b${bits}`
}

export function isGroupBits (bits: string): boolean {
  return /^[01]*$/.test(bits)
}

/**
 * The bits the next round's rule starts from: `key`'s, when it is a grid key of `prefix` as wide as
 * ours (the key a leader took its short group from, GroupInfo.gridKey: a member that was one too many
 * under its own key takes the place that key lacked), else our own.
 */
export function bitsFromKey (key: string | undefined, prefix: string, ours: string): string {
  if (key === undefined || !key.startsWith(`${prefix}.0b`)) return ours
  const bits = key.slice(prefix.length + 3)
  return bits.length === ours.length && isGroupBits(bits) ? bits : ours
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

/**
 * A Moshpit grid for `world` peers in groups of `groupSize`: the initial bits of the peer of rank
 * `rank` (0 ≤ rank < world). The swarm gets K keys, K the largest power of two with K·groupSize ≤
 * world (at least 1), and rank r starts under key r mod K, so every key holds ⌊world/K⌋ or
 * ⌈world/K⌉ peers: exactly groupSize each when world = groupSize^d and groupSize is a power of
 * two, and the swarm then holds the exact mean after d rounds of nextGroupBits. Otherwise keys
 * hold groupSize to 2·groupSize − 1 peers and the groups still mix by the same rule. Without it
 * every peer starts under one key (bits ""), whose three replicas then serve the whole swarm.
 */
export function gridGroupBits (rank: number, world: number, groupSize: number): string {
  if (!(Number.isInteger(rank) && Number.isInteger(world) && rank >= 0 && rank < world)) throw new RangeError(`rank must be an integer from 0 to ${world - 1}, got ${rank}`)
  if (!(Number.isInteger(groupSize) && groupSize >= 2)) throw new RangeError(`groupSize must be an integer of at least 2, got ${groupSize}`)
  let keys = 1
  while (keys * 2 * groupSize <= world) keys *= 2
  const width = Math.log2(keys)
  return width === 0 ? '' : (rank % keys).toString(2).padStart(width, '0')
}
