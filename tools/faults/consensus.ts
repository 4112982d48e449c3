/**
 * How far apart the agents' tensors are. Averaging within groups replaces values by convex
 * combinations, so the per-coordinate range over all agents can never grow: `spread` is the
 * reliability runs' divergence, and any rise means a value came from outside the swarm.
 */
export function spread (values: readonly Float32Array[]): number {
  if (values.length < 2) return 0
  const n = values[0].length
  let worst = 0
  for (let j = 0; j < n; j++) {
    let lo = Infinity; let hi = -Infinity
    for (const v of values) { const x = v[j]; if (x < lo) lo = x; if (x > hi) hi = x }
    const d = hi - lo
    if (d > worst || Number.isNaN(d)) worst = Number.isNaN(d) ? NaN : d
    if (Number.isNaN(worst)) return NaN
  }
  return worst
}

/** Element-wise mean of equally long tensors. */
export function mean (values: readonly Float32Array[]): Float64Array {
  const out = new Float64Array(values[0]?.length ?? 0)
  for (const v of values) for (let j = 0; j < out.length; j++) out[j] += v[j]
  for (let j = 0; j < out.length; j++) out[j] /= Math.max(1, values.length)
  return out
}

/** Largest coordinate difference between two groups' means: how far two halves of a swarm are apart. */
export function gap (a: readonly Float32Array[], b: readonly Float32Array[]): number {
  const ma = mean(a); const mb = mean(b)
  let worst = 0
  for (let j = 0; j < ma.length; j++) worst = Math.max(worst, Math.abs(ma[j] - mb[j]))
  return worst
}

/** Indices where a series rose by more than the relative tolerance (float32 rounding of means). */
export function rises (series: readonly number[], relTolerance = 1e-4): number[] {
  const out: number[] = []
  for (let i = 1; i < series.length; i++) if (series[i] > series[i - 1] * (1 + relTolerance) + 1e-6) out.push(i)
  return out
}
