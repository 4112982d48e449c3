/**
 * Pure parts of the Moshpit convergence benchmark (npm run bench:moshpit): the grid's initial group
 * bits, the seeded initial vectors, and how far the live peers are from agreeing.
 */
import { seededRandom } from '../../agent/util/random.js'

/**
 * Initial group bits of a rank on a Moshpit grid of `world` peers in groups of `groupSize`, as
 * hivemind's own grid test does (`initial_group_bits=bin(i // group_size)[2:].rjust(nbits, "0")`):
 * log2(world / groupSize) bits holding rank ÷ groupSize, so every key starts with exactly groupSize
 * peers. After each round a peer shifts in log2(groupSize) bits (its index in a permutation seeded by
 * the group id), so with world = groupSize^d every peer has mixed with every other after d rounds.
 */
export function initialGroupBits (rank: number, world: number, groupSize: number): string {
  const keys = world / groupSize
  const nbits = Math.log2(keys)
  if (!Number.isInteger(keys) || !Number.isInteger(nbits) || !Number.isInteger(Math.log2(groupSize))) {
    throw new Error(`a Moshpit grid needs world ÷ group size and the group size to be powers of two, got ${world} and ${groupSize}`)
  }
  return nbits === 0 ? '' : Math.floor(rank / groupSize).toString(2).padStart(nbits, '0')
}

/** Group sizes that make each swarm the benches run an exact grid: 16 = 4², 64 = 4³, 256 = 4⁴, 1024 = 32². */
export function defaultGroupSize (peers: number): number {
  return peers === 1024 ? 32 : 4
}

/** How many rounds a full grid needs: d with groupSize^d = world (3 for 64 peers in groups of 4). */
export function gridDimensions (world: number, groupSize: number): number {
  return Math.round(Math.log(world) / Math.log(groupSize))
}

/** Every rank's initial vector: uniform in [-1, 1), rounded to float32 so every implementation starts from the same bits. */
export function initialVectors (world: number, elements: number, seed: number): number[][] {
  const random = seededRandom(seed)
  return Array.from({ length: world }, () => Array.from({ length: elements }, () => Math.fround(random() * 2 - 1)))
}

/** Element-wise mean of the given vectors, in float64. */
export function meanOf (vectors: ReadonlyArray<readonly number[]>): number[] {
  const n = vectors.length
  const mean = new Array<number>(vectors[0]?.length ?? 0).fill(0)
  for (const v of vectors) for (let i = 0; i < v.length; i++) mean[i] += v[i] / n
  return mean
}

/** Largest |v[i] - reference[i]| over every vector and element; Infinity when a value is not finite. */
export function maxDeviation (vectors: ReadonlyArray<readonly number[]>, reference: readonly number[]): number {
  let worst = 0
  for (const v of vectors) {
    for (let i = 0; i < reference.length; i++) {
      const d = Math.abs(v[i] - reference[i])
      if (!Number.isFinite(d)) return Number.POSITIVE_INFINITY
      if (d > worst) worst = d
    }
  }
  return worst
}

/** Largest |a[i] - b[i]|. */
export function maxDifference (a: readonly number[], b: readonly number[]): number {
  return maxDeviation([a], b)
}

/** `count` distinct ranks to crash, drawn with the run's seed from 1..world-1 (rank 0, the first DHT peer, is spared). */
export function chooseVictims (world: number, count: number, seed: number): number[] {
  if (count > world - 1) throw new Error(`cannot crash ${count} of ${world} peers and keep rank 0`)
  const random = seededRandom(seed ^ 0x5eed)
  const ranks = Array.from({ length: world - 1 }, (_, i) => i + 1)
  for (let i = ranks.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1))
    const tmp = ranks[i]; ranks[i] = ranks[j]; ranks[j] = tmp
  }
  return ranks.slice(0, count).sort((a, b) => a - b)
}

/**
 * How far the vectors are from agreeing, against their own element-wise mean (all in float64):
 * `deviation` is the largest |x − mean| over every vector and element (Infinity when a value is
 * not finite); `variance` is the mean over vectors and elements of (x − mean)², i.e.
 * Σ_peers Σ_elements (x − mean)² ÷ (peers × elements): the Moshpit paper's measure ("mean number
 * of iterations until variance < 1e−9 (in parentheses < 1e−4)", §4.3 of
 * shared/reference/hivemind-averaging.md). Both are 0 for no vectors.
 */
export function distanceToMean (vectors: ReadonlyArray<ArrayLike<number>>): { deviation: number, variance: number } {
  if (vectors.length === 0) return { deviation: 0, variance: 0 }
  const n = vectors[0].length
  const mean = new Float64Array(n)
  for (const v of vectors) for (let i = 0; i < n; i++) mean[i] += v[i]
  for (let i = 0; i < n; i++) mean[i] /= vectors.length
  let deviation = 0
  let squares = 0
  for (const v of vectors) {
    for (let i = 0; i < n; i++) {
      const d = Math.abs(v[i] - mean[i])
      if (!Number.isFinite(d)) return { deviation: Number.POSITIVE_INFINITY, variance: Number.POSITIVE_INFINITY }
      if (d > deviation) deviation = d
      squares += d * d
    }
  }
  return { deviation, variance: n === 0 ? 0 : squares / (vectors.length * n) }
}
