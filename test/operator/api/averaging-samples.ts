/**
 * Averaging sections for the "admitted must run" tests: random ones within and at the edges of
 * each bound of the parameter table (api/averaging-parameters.ts), and values just outside.
 * Deterministic (seeded), so a failure reproduces. Used by the unit property test and by the
 * end-to-end test that asks a real API server (CEL rules included) for the same verdicts.
 */
import { seededRandom } from '../../../agent/util/random.js'
import { AVERAGING_KEYS, AVERAGING_PARAMETERS, type AveragingKey } from '../../../api/averaging-parameters.js'
import { durationNanos, type Bound } from '../../../api/parameter-bounds.js'
import { DEFAULT_AVERAGING } from '../../../api/v1alpha1/defaults.js'

let random = seededRandom(16)
/** Starts the sequence again from a seed. */
export function reseed (seed: number): void { random = seededRandom(seed) }
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]
const between = (lo: number, hi: number): number => lo + Math.floor(random() * (hi - lo + 1))

/** A nanosecond count in one of the spellings Go accepts: "90s", "1m30s", "1.5m", "90000ms". */
export function spell (ns: bigint): string {
  const units: Array<[string, bigint]> = [['h', 3_600_000_000_000n], ['m', 60_000_000_000n], ['s', 1_000_000_000n], ['ms', 1_000_000n], ['us', 1000n], ['ns', 1n]]
  const style = between(0, 2)
  if (style === 0) { // the largest unit that divides it
    const [u, n] = units.find(([, n]) => ns % n === 0n)!
    return `${ns / n}${u}`
  }
  if (style === 1) { // compound, as Go's String() writes it: 1h2m3.5s
    let rest = ns
    let out = ''
    for (const [u, n] of units.slice(0, 2)) { if (rest >= n) { out += `${rest / n}${u}`; rest %= n } }
    if (rest > 0n || out === '') {
      const whole = rest / 1_000_000_000n
      const frac = (rest % 1_000_000_000n).toString().padStart(9, '0').replace(/0+$/, '')
      out += frac === '' ? `${whole}s` : `${whole}.${frac}s`
    }
    return out
  }
  // a fraction of a larger unit where it is exact: 1.5m, 0.25h
  for (const [u, n] of units.slice(0, 3)) {
    const whole = ns / n
    const frac = ns % n
    const digits = (frac * 1_000_000_000n) % n === 0n ? ((frac * 1_000_000_000n) / n).toString().padStart(9, '0').replace(/0+$/, '') : null
    if (digits !== null) return digits === '' ? `${whole}${u}` : `${whole}.${digits}${u}`
  }
  return `${ns}ns`
}

const bigBetween = (lo: bigint, hi: bigint): bigint => lo + BigInt(Math.floor(random() * Number(hi - lo + 1n)))

/** A value inside the bound: an edge a third of the time, else anywhere. */
function inside (b: Bound, lo?: number | bigint, hi?: number | bigint): string | number {
  const edge = random() < 0.33
  switch (b.kind) {
    case 'int': { const l = Number(lo ?? b.min); const h = Number(hi ?? b.max); return edge ? pick([l, h]) : between(l, h) }
    case 'number': {
      const l = b.exclusiveMin === true ? b.min + Number.EPSILON * Math.max(1, b.max) : b.min
      return edge ? pick([l, b.max]) : pick([l + (b.max - l) * random(), Math.exp(Math.log(Math.max(l, 1e-12)) + (Math.log(b.max) - Math.log(Math.max(l, 1e-12))) * random())])
    }
    case 'duration': {
      const l = BigInt(lo ?? durationNanos(b.min)); const h = BigInt(hi ?? durationNanos(b.max))
      // Round inner values to a millisecond now and then, as people write them.
      const v = edge ? pick([l, h]) : bigBetween(l, h)
      return spell(!edge && random() < 0.5 && v - (v % 1_000_000n) >= l ? v - (v % 1_000_000n) : v)
    }
    case 'string': {
      const alphabet = b.pattern === '^[01]*$' ? '01' : 'ABCXYZabcxyz0189_-'
      const n = edge ? pick([b.minLength ?? 0, b.maxLength]) : between(b.minLength ?? 0, b.maxLength)
      return Array.from({ length: n }, () => pick([...alphabet])).join('')
    }
    case 'enum': return pick(b.values)
  }
}

export const P = AVERAGING_PARAMETERS

/** A random averaging section: each field absent (defaulted) now and then, the cross rules kept. */
export function randomAveraging (): Record<string, unknown> {
  const a: Record<string, unknown> = {}
  const target = inside(P.targetGroupSize.bound) as number
  const expiration = durationNanos(inside(P.averagingExpiration.bound) as string)
  const values: Record<AveragingKey, () => unknown> = {
    prefix: () => inside(P.prefix.bound),
    targetGroupSize: () => target,
    minGroupSize: () => inside(P.minGroupSize.bound, 2, target),
    initialGroupBits: () => inside(P.initialGroupBits.bound),
    averagingExpiration: () => spell(expiration),
    requestTimeout: () => inside(P.requestTimeout.bound),
    allreduceTimeout: () => inside(P.allreduceTimeout.bound),
    partSizeBytes: () => inside(P.partSizeBytes.bound),
    averagingAlpha: () => inside(P.averagingAlpha.bound),
    compression: () => inside(P.compression.bound),
    period: () => inside(P.period.bound),
    dataThreads: () => inside(P.dataThreads.bound),
    bandwidth: () => inside(P.bandwidth.bound)
  }
  for (const k of AVERAGING_KEYS) if (random() < 0.85) a[k] = values[k]()
  // Defaulted fields still have to satisfy the rules with the given ones.
  const target2 = Number(a.targetGroupSize ?? DEFAULT_AVERAGING.targetGroupSize)
  if (Number(a.minGroupSize ?? DEFAULT_AVERAGING.minGroupSize) > target2) a.minGroupSize = inside(P.minGroupSize.bound, 2, target2)
  const exp = durationNanos(String(a.averagingExpiration ?? DEFAULT_AVERAGING.averagingExpiration))
  const below = exp - 1n < durationNanos(P.requestTimeout.bound.max) ? exp - 1n : durationNanos(P.requestTimeout.bound.max)
  if (durationNanos(String(a.requestTimeout ?? DEFAULT_AVERAGING.requestTimeout)) >= exp) a.requestTimeout = inside(P.requestTimeout.bound, undefined, below)
  return a
}

export const swarmObject = (name: string, averaging: Record<string, unknown>, auxiliary = 0) => ({
  apiVersion: 'averaging.swarm.io/v1alpha1', kind: 'AveragingSwarm', metadata: { name, namespace: 'team-a' }, spec: { replicas: 2, auxiliary: { replicas: auxiliary }, averaging }
})

/** Values just outside each bound (and a few the pattern refuses), per field. */
export const OUTSIDE: Record<AveragingKey, unknown[]> = {
  prefix: ['', 'team:demo', 'team.demo', 'a b', 'x'.repeat(129)],
  targetGroupSize: [1, 257, 2.5],
  minGroupSize: [1, 0, 257],
  initialGroupBits: ['012', '0'.repeat(65)],
  averagingExpiration: ['0s', '999ms', '999999999ns', '1h0m0.000000001s', '2h', '15'],
  requestTimeout: ['0s', '99ms', '99999us', '10m0.001s'],
  allreduceTimeout: ['0s', '1ns', '999ms', '24h0m1s', '600h', '1d'],
  partSizeBytes: [1023, 4194305, 0],
  averagingAlpha: [0, -0.5, 1.0000001, 2],
  compression: ['zstd', ''],
  period: ['0s', '0.5s', '999ms', '24h1s', '25h'],
  dataThreads: [-1, 65],
  bandwidth: [0, -1, 1.0000001e15]
}

