import { seededRandom } from '../../util/random.js'

export const FEATURES = 16
export const CLASSES = 4

export interface Dataset {
  readonly x: Float32Array   // samples × FEATURES
  readonly y: Int32Array     // class per sample
  readonly size: number
}

/** Class centres shared by every shard: one fixed "world" the swarm learns together. */
function centres (): Float32Array {
  const random = seededRandom('avs-world')
  const c = new Float32Array(CLASSES * FEATURES)
  for (let i = 0; i < c.length; i++) c[i] = (random() * 2 - 1) * 1.5
  return c
}

function gaussian (random: () => number): number {
  return Math.sqrt(-2 * Math.log(random() + 1e-12)) * Math.cos(2 * Math.PI * random())
}

function sample (count: number, classOf: (i: number, r: () => number) => number, seed: string): Dataset {
  const random = seededRandom(seed)
  const c = centres()
  const x = new Float32Array(count * FEATURES)
  const y = new Int32Array(count)
  for (let i = 0; i < count; i++) {
    const k = classOf(i, random)
    y[i] = k
    for (let f = 0; f < FEATURES; f++) x[i * FEATURES + f] = c[k * FEATURES + f] + gaussian(random)
  }
  return { x, y, size: count }
}

/**
 * Shard i is non-IID: 90% of its samples come from two classes (i and i+1 mod CLASSES), so an
 * agent training alone learns a biased model and only the swarm sees the whole world.
 */
export function makeShard (shardIndex: number, count = 2048): Dataset {
  const major = [shardIndex % CLASSES, (shardIndex + 1) % CLASSES]
  return sample(count, (_i, r) => r() < 0.9 ? major[r() < 0.5 ? 0 : 1] : Math.floor(r() * CLASSES), `avs-shard-${shardIndex}`)
}

/** Balanced held-out data, the same for every agent. */
export function makeHeldOut (count = 2048): Dataset {
  return sample(count, (i) => i % CLASSES, 'avs-held-out')
}

/** Concatenation of shards: what one model trained on all the data sees. */
export function concat (sets: readonly Dataset[]): Dataset {
  const size = sets.reduce((n, s) => n + s.size, 0)
  const x = new Float32Array(size * FEATURES)
  const y = new Int32Array(size)
  let at = 0
  for (const s of sets) { x.set(s.x, at * FEATURES); y.set(s.y, at); at += s.size }
  return { x, y, size }
}
