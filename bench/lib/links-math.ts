/** Pure arithmetic of the shaped-links benchmark (bench/links.ts): profiles and floors. */
import { spanFractions } from '../../agent/allreduce/load-balancing.js'

/** Link rates in Mbit/s, one per peer. */
export const PROFILES: Readonly<Record<string, readonly number[]>> = {
  '100m': [100, 100, 100, 100],
  '1g': [1000, 1000, 1000, 1000],
  mixed: [1000, 1000, 100, 100],
  '8x100m': Array.from({ length: 8 }, () => 100)
}

/** A profile by name, or an explicit list "1000,1000,100,100". */
export function profileRates (name: string): number[] {
  const known = PROFILES[name]
  if (known !== undefined) return [...known]
  const rates = name.split(',').map(Number)
  if (rates.length < 2 || !rates.every(r => Number.isFinite(r) && r > 0)) {
    throw new Error(`profile must be one of ${Object.keys(PROFILES).join(', ')} or at least two rates in Mbit/s ("1000,100,..."), got "${name}"`)
  }
  return rates
}

/** Wire bytes per element: the codec's (auto is bounded below by float16's). */
export function bytesPerElement (codec: string): number {
  return codec === 'none' ? 4 : codec === 'float16' || codec === 'auto' ? 2 : 1
}

/**
 * Seconds the busiest link needs at line rate for one butterfly all-reduce of `bytes` per peer
 * when peer i reduces fraction f_i: it sends and receives bytes·(1 + (n-2)·f_i) each way (its
 * values on the others' spans, the others' values on its span, then the means both ways).
 */
export function floorSeconds (bytes: number, mbit: readonly number[], fractions: readonly number[]): number {
  const n = mbit.length
  return Math.max(...mbit.map((rate, i) => bytes * (1 + (n - 2) * fractions[i]) / (rate * 1e6 / 8)))
}

/** Equal spans (what ring all-reduce and undeclared bandwidth do). */
export function equalSplitFloor (bytes: number, mbit: readonly number[]): number {
  return floorSeconds(bytes, mbit, mbit.map(() => 1 / mbit.length))
}

/** Spans sized by the true rates (the agent's load balancing, water-filled): the least any split can do. */
export function bestSplitFloor (bytes: number, mbit: readonly number[]): number {
  return floorSeconds(bytes, mbit, spanFractions(mbit, mbit.map(() => 'node')))
}

/** Seconds the busiest link direction needs at line rate for the bytes tbf counted on it, per round. */
export function wireFloorSeconds (moved: ReadonlyArray<{ sent: number, received: number }>, mbit: readonly number[], rounds: number): number {
  return Math.max(...moved.map((m, i) => Math.max(m.sent, m.received) / rounds / (mbit[i] * 1e6 / 8)))
}
