/**
 * Kinds of bound a parameter row (api/averaging-parameters.ts) can carry, and the three things
 * every consumer does with one: check a value in the CRD's form, read it from an environment
 * string, and convert it to the agent's form (durations in seconds).
 */

/** Go duration ("15s", "1m30s", "500ms"); the agent parses the same syntax. */
export const DURATION_PATTERN = '^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$'
/** Longest wait a Node timer holds (2^31 - 1 ms, about 24.8 days); setTimeout fires at once past it. */
export const MAX_TIMER_SECONDS = 2_147_483.647

export type Bound =
  | { readonly kind: 'int', readonly min: number, readonly max: number }
  | { readonly kind: 'number', readonly min: number, readonly exclusiveMin?: boolean, readonly max: number }
  | { readonly kind: 'duration', readonly min: string, readonly max: string }
  | { readonly kind: 'string', readonly pattern: string, readonly minLength?: number, readonly maxLength: number, readonly says: string }
  | { readonly kind: 'enum', readonly values: readonly string[] }

const UNIT_NS: Record<string, bigint> = { h: 3_600_000_000_000n, m: 60_000_000_000n, s: 1_000_000_000n, ms: 1_000_000n, us: 1000n, µs: 1000n, ns: 1n }

/** Exact nanoseconds of a Go-style duration ("15s", "500ms", "1m30s", "1.5h"); throws on anything else. */
export function durationNanos (text: string): bigint {
  const re = /(\d+)(?:\.(\d+))?(h|ms|m|s|us|µs|ns)/gy
  let total = 0n
  let matched = 0
  let m: RegExpExecArray | null
  while ((m = re.exec(text)) !== null) {
    const unit = UNIT_NS[m[3]]
    total += BigInt(m[1]) * unit
    if (m[2] !== undefined) total += BigInt(m[2]) * unit / 10n ** BigInt(m[2].length)
    matched += m[0].length
  }
  if (text.length === 0 || matched !== text.length) throw new Error(`"${text}" is not a duration such as 15s, 500ms or 1m30s`)
  return total
}

/** Parses Go-style durations ("15s", "500ms", "1m30s", "2h") into seconds. */
export function parseDuration (text: string): number {
  return Number(durationNanos(text)) / 1e9
}

/** What a bound admits, as words: "an integer from 2 to 256", "a duration from 1s to 24h". */
export function formatRange (b: Bound): string {
  switch (b.kind) {
    case 'int': return `an integer from ${b.min} to ${b.max}`
    case 'number': return `a number ${b.exclusiveMin === true ? 'above' : 'from'} ${b.min} ${b.exclusiveMin === true ? 'and at most' : 'to'} ${b.max}`
    case 'duration': return `a duration from ${b.min} to ${b.max}`
    case 'string': return b.says
    case 'enum': return `one of ${b.values.join(', ')}`
  }
}

/** Why a value in the CRD's form is outside the bound ("must be ..., got ..."), or undefined when it is inside. */
export function checkValue (b: Bound, v: unknown): string | undefined {
  const bad = `must be ${formatRange(b)}, got ${JSON.stringify(v)}`
  switch (b.kind) {
    case 'int': return typeof v === 'number' && Number.isInteger(v) && v >= b.min && v <= b.max ? undefined : bad
    case 'number': return typeof v === 'number' && Number.isFinite(v) && (b.exclusiveMin === true ? v > b.min : v >= b.min) && v <= b.max ? undefined : bad
    case 'duration': {
      if (typeof v !== 'string' || !new RegExp(DURATION_PATTERN).test(v)) return bad
      const ns = durationNanos(v)
      return ns >= durationNanos(b.min) && ns <= durationNanos(b.max) ? undefined : bad
    }
    case 'string': return typeof v === 'string' && new RegExp(b.pattern).test(v) && v.length >= (b.minLength ?? 0) && v.length <= b.maxLength ? undefined : bad
    case 'enum': return typeof v === 'string' && b.values.includes(v) ? undefined : bad
  }
}

/** An environment string in the CRD's form: numbers become numbers, the rest stays text. */
export function fromEnv (b: Bound, text: string): string | number {
  if (b.kind === 'int') return /^[+-]?\d+$/.test(text.trim()) ? Number(text) : NaN
  if (b.kind === 'number') return text.trim() === '' ? NaN : Number(text)
  return text
}

/** A checked value in the agent's form: durations in seconds, the rest unchanged. */
export function toAgent (b: Bound, v: string | number): string | number {
  return b.kind === 'duration' ? parseDuration(String(v)) : v
}
