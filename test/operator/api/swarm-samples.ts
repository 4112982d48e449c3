/**
 * Random swarms drawn from the CRD's schema itself: each field present or not, values within its
 * type, bounds, enum and pattern (at the edges a third of the time), then trimmed to what the local
 * validator admits. Seeded, so a failure reproduces. Used by the unit test that every admitted swarm
 * yields env every agent loads (admitted-swarms.test.ts) and by the end-to-end test that the API
 * server admits them too and takes every object the operator builds from them.
 */
import { seededRandom } from '../../../agent/util/random.js'
import { swarmSchema } from '../../../api/v1alpha1/schema.js'
import type { Schema } from '../../../api/v1alpha1/schema-builders.js'
import { validateSwarm } from '../../../api/v1alpha1/validate.js'
import { samplePattern } from './pattern-sampler.js'

let random = seededRandom(35)
/** Starts the sequence again from a seed. */
export function reseedSwarms (seed: number): void { random = seededRandom(seed) }
const between = (lo: number, hi: number): number => lo + Math.floor(random() * (hi - lo + 1))
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]
const LETTERS = 'abcdefghijklmnopqrstuvwxyz'
const word = (n: number): string => Array.from({ length: n }, () => pick([...LETTERS])).join('')

/** A value for one schema node, or undefined where none could be drawn (a pattern missed 30 times). */
function draw (s: Schema): unknown {
  if (s.enum !== undefined) return pick(s.enum)
  if (s.anyOf !== undefined) return random() < 0.5 ? between(s.minimum ?? 0, 64) : drawString(s)
  switch (s.type) {
    case 'boolean': return random() < 0.5
    case 'integer': {
      const lo = s.minimum ?? 0
      const hi = s.maximum ?? 1000
      return random() < 0.33 ? pick([lo, hi]) : between(lo, hi)
    }
    case 'number': {
      const lo = s.minimum ?? 0
      const hi = s.maximum ?? 1000
      const low = s.exclusiveMinimum === true ? lo + Number.EPSILON * Math.max(1, hi) : lo
      return random() < 0.33 ? pick([low, hi]) : low + (hi - low) * random()
    }
    case 'string': return drawString(s)
    case 'array': {
      const items = Array.from({ length: between(s.minItems ?? 0, Math.min(s.maxItems ?? 3, 3)) }, () => draw(s.items!))
      return items.some(i => i === undefined) ? undefined : items
    }
    case 'object': return drawObject(s)
    default: return undefined
  }
}

function drawString (s: Schema): string | undefined {
  const min = s.minLength ?? 0
  const max = s.maxLength ?? 253
  // A string the schema does not constrain: a plain word mostly, else any of the characters people
  // mistype into names (upper case, dots, underscores, spaces, slashes).
  if (s.pattern === undefined) {
    const n = between(Math.max(min, 1), Math.min(max, 16))
    return random() < 0.7 ? word(n) : Array.from({ length: n }, () => pick([...LETTERS, ...'ABZ09-._ /'])).join('')
  }
  const re = new RegExp(s.pattern)
  for (let i = 0; i < 30; i++) {
    const v = samplePattern(s.pattern, random)
    if (re.test(v) && v.length >= min && v.length <= max) return v
  }
  return undefined
}

function drawObject (s: Schema): Record<string, unknown> | undefined {
  const out: Record<string, unknown> = {}
  const required = new Set(s.required ?? [])
  // Kubernetes core types kept verbatim (a container, an env var, an affinity): their required fields only.
  const opaque = s['x-kubernetes-preserve-unknown-fields'] === true
  for (const [k, p] of Object.entries(s.properties ?? {})) {
    if (!required.has(k) && (opaque || random() > 0.35)) continue
    const v = draw(p)
    if (v === undefined) { if (required.has(k)) return undefined; continue }
    out[k] = v
  }
  if (s.additionalProperties !== undefined) {
    for (let i = between(0, 2); i > 0; i--) {
      const v = draw(s.additionalProperties)
      // Keys people write, right and wrong: label keys, resource names, and neither.
      if (v !== undefined) out[pick(['app', 'example.com/team', 'nvidia.com/gpu', 'cpu', 'memory', `k-${word(4)}`, 'My Key', 'kubernetes.io/x'])] = v
    }
  }
  return out
}

/** Deletes the field a problem names ("spec.a.b[2].c …" → spec.a.b), or its parent when that was tried. */
function removeNamed (obj: Record<string, unknown>, problem: string, tried: Set<string>): boolean {
  let path = problem.split(/[ :]/)[0].replace(/\[\d+\].*$/, '')
  while (tried.has(path) && path.includes('.')) path = path.slice(0, path.lastIndexOf('.'))
  if (path === 'spec' || !path.startsWith('spec.')) return false
  tried.add(path)
  const keys = path.split('.')
  let o: unknown = obj
  for (const k of keys.slice(0, -1)) o = (o as Record<string, unknown> | undefined)?.[k]
  if (o !== null && typeof o === 'object') delete (o as Record<string, unknown>)[keys[keys.length - 1]]
  return true
}

/** A random spec the local validator admits, or undefined when removing named fields did not get there. */
export function admittedSwarm (i: number, namespace = 'team-a'): Record<string, unknown> | undefined {
  return admitted(drawnSwarm(i, namespace))
}

/** A swarm as drawn, before anything the validator refuses is taken out (undefined: a required pattern missed). */
export function drawnSwarm (i: number, namespace = 'team-a'): Record<string, unknown> | undefined {
  const spec = drawObject(swarmSchema.properties!.spec)
  return spec === undefined ? undefined : { apiVersion: 'averaging.swarm.io/v1alpha1', kind: 'AveragingSwarm', metadata: { name: `s${i}`, namespace }, spec }
}

/** The drawn swarm with the fields the validator names removed until it admits it (a copy), or undefined. */
export function admitted (drawn: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  if (drawn === undefined) return undefined
  const obj = structuredClone(drawn)
  const tried = new Set<string>()
  for (let round = 0; round < 12; round++) {
    const problems = validateSwarm(obj)
    if (problems.length === 0) return obj
    if (!problems.every(p => removeNamed(obj, p, tried))) return undefined
  }
  return undefined
}

