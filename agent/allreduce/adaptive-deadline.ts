/**
 * How long a reducer keeps waiting for a sender's part once most of the group has delivered it
 * (hivemind issue 676 asks for the same: median + k·MAD over arrival times, with a
 * quorum). Pure: the runner feeds it the waits it measured (agent/allreduce/sender-deadlines.ts).
 *
 * A "wait" is the time a reducer spent waiting for one sender's part: for the span's first part
 * from the round's start (it includes connecting), for later ones from the moment the reducer
 * began reading that sender's next part. A sender that still owes a part is cut off once its wait
 * passes the limit computed from the waits of the senders that already delivered that part.
 */

/**
 * k of median + k·MAD. The MAD is scaled by 1.4826 so that it estimates a standard deviation for
 * normal data; arrival times have a long right tail (GC pauses, a congested hop), so k is 4, not
 * the usual 3: an honest sender is cut off only when it is far out of line with the rest.
 */
export const MAD_K = 4
const MAD_TO_SIGMA = 1.4826

/**
 * The slack over the median is at least the median itself (a sender may take twice as long as the
 * typical one), so that waits measured in a few ms on loopback, whose MAD is close to zero, never
 * cut off a sender that is merely a little behind.
 */
export const MEDIAN_FRACTION = 1

/**
 * Scratch for the sorts below. The deadlines judge every part that arrives (thousands a round), and
 * a copied, sorted array per median was the largest single source of the garbage that sets off V8's
 * full collections: Array.prototype.sort's work arrays die in the old generation (a heap sampling
 * profile that keeps what major GCs collect, 4 peers × 25M floats: `sort` 35 of 230 MB).
 */
let scratch = new Float64Array(64)

function sortedScratch (values: readonly number[], center?: number): Float64Array {
  const n = values.length
  if (scratch.length < n) scratch = new Float64Array(2 * n)
  if (n > 32) {
    for (let i = 0; i < n; i++) scratch[i] = center === undefined ? values[i] : Math.abs(values[i] - center)
    scratch.subarray(0, n).sort() // numeric, in place, off the JavaScript heap
    return scratch
  }
  for (let i = 0; i < n; i++) {
    // Insertion sort: the lists are usually a group's senders or reducers, a handful of values.
    const v = center === undefined ? values[i] : Math.abs(values[i] - center)
    let j = i - 1
    while (j >= 0 && scratch[j] > v) { scratch[j + 1] = scratch[j]; j-- }
    scratch[j + 1] = v
  }
  return scratch
}

function middle (sorted: Float64Array, n: number): number {
  const mid = n >> 1
  return n % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
}

export function median (values: readonly number[]): number {
  if (values.length === 0) return NaN
  return middle(sortedScratch(values), values.length)
}

/** Median absolute deviation from the median (unscaled). */
export function mad (values: readonly number[]): number {
  if (values.length === 0) return NaN
  const m = median(values)
  return middle(sortedScratch(values, m), values.length)
}

/**
 * Whether enough of a part's contributions are in for the rest to get an adaptive deadline: a
 * strict majority of the senders still expected (ours included when we send). A majority makes
 * the median a median of the group, not of a fast minority: a slow minority can be cut off, a
 * slow majority never is (the round then waits for it, up to the fixed timeouts, as before).
 * A group of two never qualifies: cutting off the only other sender leaves nothing to average.
 */
export function quorumReached (delivered: number, expected: number): boolean {
  return expected >= 2 && delivered < expected && delivered >= Math.floor(expected / 2) + 1
}

export interface AdaptiveWait {
  /** Milliseconds a sender may wait for this part before it is cut off. */
  readonly limitMs: number
  /** Milliseconds into its wait a sender still owing the part is late by the statistics alone (median + max(k·σ̂, median), no floor, at most limitMs): its liveness is checked from then (late-checks.ts). */
  readonly checkMs: number
  readonly medianMs: number
  readonly madMs: number
}

/**
 * The adaptive limit on a sender's wait, from the waits `samples` (ms) of the senders that
 * delivered the same part: median + max(k·σ̂, median, floorMs), never above capMs (the fixed
 * sender timeout, which keeps applying). floorMs is the least slack any sender gets whatever the
 * statistics say (the averager passes two request timeouts: how late a message may be on this
 * network by the operator's own account). Undefined without samples.
 */
export function adaptiveWait (samples: readonly number[], floorMs: number, capMs: number): AdaptiveWait | undefined {
  if (samples.length === 0) return undefined
  const medianMs = median(samples)
  const madMs = mad(samples)
  const statistical = Math.max(MAD_K * MAD_TO_SIGMA * madMs, MEDIAN_FRACTION * medianMs)
  const limitMs = Math.min(medianMs + Math.max(statistical, floorMs), capMs)
  return { limitMs, checkMs: Math.min(medianMs + statistical, limitMs), medianMs, madMs }
}
