/**
 * What an agent declares as its bandwidth when the spec sets none: the rate its link
 * actually carried in recent rounds. The mean rate of a round (bytes ÷ round time) cannot serve:
 * every member waits for the slowest, so each one's mean rate is just its share of the bytes over
 * the same round time, and spans sized by it stay wherever they started. The peak rate over a
 * short window can: while a fast peer exchanges with another fast peer its link runs at its own
 * speed, and a slow peer's link is full the whole round.
 *
 * The bytes come from the kernel's interface counters of our network namespace (a pod's own link),
 * not from the parts we read: a reader starved of CPU reads a full socket buffer at once, which
 * looked like 2× a 100 Mbit/s link's rate; the kernel counts packets as they arrive. Where every
 * agent shares one namespace (loopback tests), all see the same counters and declare the same
 * rate: equal spans, as before. Without /proc (not Linux) the parts' bytes are the fallback.
 */
import { readFileSync } from 'node:fs'

export interface ByteSample {
  /** ms, monotonic */
  readonly t: number
  /** bytes received so far this round */
  readonly bytes: number
}

/** Bytes received and sent over every interface of our network namespace, or undefined without /proc/self/net/dev. */
export function netBytes (): { rx: number, tx: number } | undefined {
  let text: string
  try { text = readFileSync('/proc/self/net/dev', 'utf8') } catch { return undefined }
  return parseNetDev(text)
}

/** /proc/net/dev: "iface: rx_bytes rx_packets ... (8 rx fields) tx_bytes ...", summed over interfaces. */
export function parseNetDev (text: string): { rx: number, tx: number } | undefined {
  let rx = 0; let tx = 0; let seen = false
  for (const line of text.split('\n')) {
    const m = /^\s*[^:\s]+:\s*(.*)$/.exec(line)
    if (m == null) continue
    const f = m[1].trim().split(/\s+/).map(Number)
    if (f.length < 16 || !f.every(Number.isFinite)) continue
    rx += f[0]; tx += f[8]; seen = true
  }
  return seen ? { rx, tx } : undefined
}

/** Samples every SAMPLE_MS; a window of WINDOW_MS averages out a burst read from a full socket buffer. */
export const SAMPLE_MS = 50
export const WINDOW_MS = 300

/**
 * Highest bytes/s over any window of at least windowMs; undefined with no bytes, or for a round
 * shorter than one window (shortRound). Such a round's rate was mostly when its few samples fell
 * and how long the member waited for the others: in a CI run, 4 agents on loopback with 200 KB
 * tensors (~100 ms rounds) measured one member at a fraction of the others' rate, and the spans
 * sized from it gave that member nothing to reduce. A link that moves a round in under a window is
 * not what sets the round, so there is nothing worth declaring.
 */
export function peakWindowRate (samples: readonly ByteSample[], windowMs = WINDOW_MS): number | undefined {
  if (samples.length < 2) return undefined
  const first = samples[0]; const last = samples[samples.length - 1]
  if (!(last.bytes > first.bytes) || !(last.t > first.t) || shortRound(last.t - first.t, windowMs)) return undefined
  let best = 0
  let j = 0
  for (let i = 1; i < samples.length; i++) {
    while (j + 1 < i && samples[i].t - samples[j + 1].t >= windowMs) j++
    const dt = samples[i].t - samples[j].t
    if (dt >= windowMs) best = Math.max(best, (samples[i].bytes - samples[j].bytes) / dt * 1000)
  }
  return best > 0 ? best : undefined
}

/** Whether a round of this many ms is too short to measure a link by (peakWindowRate): shorter than one window. */
export function shortRound (durationMs: number, windowMs = WINDOW_MS): boolean {
  return durationMs < windowMs
}

/**
 * Smooths round estimates: a halving or doubling is a changed link (take it at once, so a rate
 * changed mid-run moves the spans the next round); smaller moves are noise (average half-half).
 */
export function smoothRate (previous: number | undefined, next: number | undefined): number | undefined {
  if (next === undefined || !(next > 0) || !Number.isFinite(next)) return previous
  if (previous === undefined) return next
  const ratio = next / previous
  return ratio >= 2 || ratio <= 0.5 ? next : (previous + next) / 2
}
