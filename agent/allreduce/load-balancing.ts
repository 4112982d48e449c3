/**
 * How much of the flat vector each group member reduces (hivemind's load_balance_peers, §3.1 of the notes),
 * computed in closed form so every member derives bit-identical fractions from the same gathered metadata.
 */

export type PeerMode = 'node' | 'client' | 'auxiliary'

/**
 * Fractions of the flat vector each peer reduces (sum 1, >= 0). Client peers get 0. bandwidth null = unspecified.
 * Rules (hivemind's, §3.1): if no peer declares a positive bandwidth → equal split among non-client peers
 * (peers with bandwidth exactly 0 get 0 too). Else unspecified peers get the mean of the declared positive ones, and
 * fractions minimise max_i (1 + (N-2) w_i) / b_i (closed-form water-filling, no LP library); for N <= 2 proportional
 * to bandwidth. Throws if no peer can reduce (all client / zero).
 *
 * Water-filling: at the optimum every peer that reduces has the same cost λ = (1 + (N−2) w_i) / b_i, so
 * w_i = (λ b_i − 1) / (N − 2), and peers with λ b_i ≤ 1 reduce nothing. Taking peers by descending bandwidth, the
 * active set is the largest prefix whose slowest member still gets w ≥ 0; λ follows from Σ w = 1. When a slow peer
 * alone already costs more than λ (1 / b_slow > λ), the LP's optimum value is set by that peer and many fraction
 * vectors tie; we return the water-filling one, which also minimises the cost of the peers that do reduce.
 * N counts every group member (clients send too), as hivemind's cost model does.
 */
export function spanFractions (bandwidths: ReadonlyArray<number | null>, modes: ReadonlyArray<PeerMode>): number[] {
  const n = bandwidths.length
  if (modes.length !== n) {
    throw new Error(`Load balancing needs one mode per peer, got ${modes.length} modes for ${n} bandwidths.`)
  }
  for (let i = 0; i < n; i++) {
    const b = bandwidths[i]
    if (b !== null && !(typeof b === 'number' && Number.isFinite(b) && b >= 0)) {
      throw new Error(`Peer ${i} declares bandwidth ${String(b)}; a bandwidth must be null or a finite number >= 0.`)
    }
    if (modes[i] !== 'node' && modes[i] !== 'client' && modes[i] !== 'auxiliary') {
      throw new Error(`Peer ${i} has unknown mode "${String(modes[i])}"; expected node, client or auxiliary.`)
    }
  }
  // Clients reduce nothing whatever they declare.
  const declared = bandwidths.map((b, i) => modes[i] === 'client' ? 0 : b)
  const positive = declared.filter((b): b is number => b !== null && b > 0)

  if (positive.length === 0) {
    const scores = declared.map(b => b === null ? 1 : 0)
    return normalise(scores)
  }
  const meanDeclared = positive.reduce((sum, b) => sum + b, 0) / positive.length
  const effective = declared.map(b => b === null ? meanDeclared : b)
  if (n <= 2) return normalise(effective)
  return normalise(waterFill(effective, n))
}

/**
 * Measured rates within this factor of the smallest in their run are taken as one rate. A rate an
 * agent measures (agent/adapt/link-rate.ts) varies by ~10 % between equal links (8 agents on equal
 * 100 Mbit/s links declared 98–109 Mbit/s), and the water-filling above amplifies a difference about
 * (N − 2)-fold: the agent that declared 109 got a span 22 % larger than the rest and sent 188.8 MB a
 * round where the others sent 170–177, the busiest link holding the round ~8 % over the equal split.
 * Links apart by more than this (the mixed profile's 1 Gbit/s and 100 Mbit/s) still get their own.
 */
export const MEASURED_RATE_TOLERANCE = 1.15

/**
 * Bandwidths with measured rates merged: sorted, the measured ones form runs in which each is at most
 * MEASURED_RATE_TOLERANCE × the run's smallest, and every member of a run gets the run's mean. Rates
 * set by hand (measured false) and null ones stay as they are. Every member computes the same from
 * the same gathered infos; makePlan applies it only where every member declared whether its rate was
 * measured (PeerInfo.bandwidth_measured), so a group with an agent from before the rule keeps the old one.
 */
export function measuredAsEqual (bandwidths: ReadonlyArray<number | null>, measured: readonly boolean[]): Array<number | null> {
  const out = [...bandwidths]
  const order = bandwidths
    .map((b, i) => ({ b, i }))
    .filter((p): p is { b: number, i: number } => measured[p.i] && p.b !== null && p.b > 0)
    .sort((p, q) => p.b - q.b || p.i - q.i)
  for (let start = 0; start < order.length;) {
    let end = start + 1
    while (end < order.length && order[end].b <= MEASURED_RATE_TOLERANCE * order[start].b) end++
    const run = order.slice(start, end)
    const mean = run.reduce((sum, p) => sum + p.b, 0) / run.length
    for (const p of run) out[p.i] = mean
    start = end
  }
  return out
}

/** w_i ∝ max(0, λ b_i − 1) with λ chosen as described above; peers with b_i = 0 get 0. */
function waterFill (bandwidths: readonly number[], n: number): number[] {
  const order = bandwidths
    .map((b, i) => ({ b, i }))
    .filter(p => p.b > 0)
    .sort((p, q) => q.b - p.b || p.i - q.i)
  let level = 0
  let sum = 0
  for (let k = 0; k < order.length; k++) {
    sum += order[k].b
    level = (n - 2 + (k + 1)) / sum
    const next = order[k + 1]
    if (next === undefined || level * next.b <= 1) break
  }
  return bandwidths.map(b => b > 0 ? Math.max(0, (level * b - 1) / (n - 2)) : 0)
}

/** Scale non-negative scores to sum 1; throws when all are zero (nobody can reduce). */
function normalise (scores: readonly number[]): number[] {
  const total = scores.reduce((sum, s) => sum + s, 0)
  if (!(total > 0)) {
    throw new Error('No peer in the group can reduce: every peer is a client or declares zero bandwidth.')
  }
  return scores.map(s => s / total)
}

/**
 * Integer counts summing exactly to total, proportional to scores (Hagenbach-Bischoff / largest remainder),
 * deterministic tie-break by index. Each peer first gets floor(total · score / Σscores); the remaining units go to
 * the largest fractional parts, lower index first on ties. A zero score always gets 0.
 */
export function apportion (total: number, scores: ReadonlyArray<number>): number[] {
  if (!Number.isSafeInteger(total) || total < 0) {
    throw new Error(`Cannot apportion ${String(total)} items; the total must be a non-negative integer.`)
  }
  for (let i = 0; i < scores.length; i++) {
    if (!(Number.isFinite(scores[i]) && scores[i] >= 0)) {
      throw new Error(`Score ${i} is ${String(scores[i])}; scores must be finite numbers >= 0.`)
    }
  }
  const scoreSum = scores.reduce((sum, s) => sum + s, 0)
  if (total === 0) return scores.map(() => 0)
  if (!(scoreSum > 0)) throw new Error(`Cannot apportion ${total} items when every score is zero.`)

  const quotas = scores.map(s => total * (s / scoreSum))
  const counts = quotas.map(q => Math.min(total, Math.floor(q)))
  let remaining = total - counts.reduce((sum, c) => sum + c, 0)
  // Rounding error could in principle overshoot by a unit; take it back from the smallest remainders.
  const byRemainder = scores
    .map((s, i) => ({ i, s, r: quotas[i] - Math.floor(quotas[i]) }))
    .filter(p => p.s > 0)
    .sort((p, q) => q.r - p.r || p.i - q.i)
  for (let j = byRemainder.length - 1; remaining < 0 && j >= 0; j--) {
    const i = byRemainder[j].i
    if (counts[i] > 0) { counts[i]--; remaining++ }
  }
  for (let j = 0; remaining > 0; j = (j + 1) % byRemainder.length) {
    counts[byRemainder[j].i]++
    remaining--
  }
  return counts
}
