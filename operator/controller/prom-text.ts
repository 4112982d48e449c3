/**
 * A small parser of the Prometheus text exposition format (version 0.0.4): enough to read
 * counters, gauges and histogram _sum/_count from an agent's /metrics. Comments, TYPE/HELP
 * lines and timestamps are skipped; malformed lines are ignored rather than fatal.
 */

export interface Sample { name: string, labels: Record<string, string>, value: number }

const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$/
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?/g

function unescape (v: string): string {
  return v.replace(/\\(.)/g, (_, c: string) => c === 'n' ? '\n' : c)
}

function number (v: string): number {
  if (v === '+Inf') return Infinity
  if (v === '-Inf') return -Infinity
  return Number(v)
}

export function parsePrometheusText (text: string): Sample[] {
  const out: Sample[] = []
  for (const raw of text.split('\n')) {
    const line = raw.trim()
    if (line === '' || line.startsWith('#')) continue
    const m = LINE.exec(line)
    if (m === null) continue
    const labels: Record<string, string> = {}
    for (const l of (m[2] ?? '').matchAll(LABEL)) labels[l[1]] = unescape(l[2])
    const value = number(m[3])
    if (!Number.isNaN(value) || m[3] === 'NaN') out.push({ name: m[1], labels, value })
  }
  return out
}

/** Sum of every sample of a metric whose labels include `match`. */
export function sumOf (samples: Sample[], name: string, match: Record<string, string> = {}): number | undefined {
  let sum: number | undefined
  for (const s of samples) {
    if (s.name !== name) continue
    if (Object.entries(match).some(([k, v]) => s.labels[k] !== v)) continue
    sum = (sum ?? 0) + s.value
  }
  return sum
}
