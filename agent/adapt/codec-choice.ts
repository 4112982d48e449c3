/**
 * compression: auto: each round the group takes none or float16, whichever its members
 * measured faster. float16 halves the bytes but costs CPU to encode and decode; on a slow link it
 * halves the round, on a fast link with busy cores it lengthens it. Rather than model both, each
 * member keeps the all-reduce time it measured with each codec and declares both in matchmaking
 * (PeerInfo.seconds_none / seconds_float16); every member then computes the same choice from the
 * same gathered infos, so the group agrees without another message.
 */
import type { CompressionName } from '../compression/index.js'

export const AUTO_CODECS = ['none', 'float16'] as const satisfies readonly CompressionName[]
export type AutoCodec = typeof AUTO_CODECS[number]

/**
 * float16 must beat none by this factor: it loses precision and spends CPU, and on busy cores a
 * round's time varies by more than the two codecs differ at 1 Gbit/s (2.5 s vs 2.8-4.9 s on the 2
 * shared cores), so without a margin the group flipped between them every round.
 */
export const FLOAT16_MARGIN = 0.9

/**
 * A codec not used for this many rounds loses its estimate and is tried again: links change. Each
 * probe that finds it still the slower doubles the wait, up to MAX_REPROBE_ROUNDS: at 1 Gbit/s on
 * busy cores a float16 probe every 10 rounds cost more than the choice saved (one round in ten at
 * the slower codec). A probe it wins brings the wait back to REPROBE_ROUNDS.
 */
export const REPROBE_ROUNDS = 10
export const MAX_REPROBE_ROUNDS = 160

/**
 * The codec in use taking this factor longer or shorter than when the other was last measured means
 * the link or the cores changed: the other is probed at the next round, whatever the wait, and the
 * one in use is measured again from its last round (its average still holds the old link).
 */
export const CHANGED_RATIO = 2

export interface CodecTimes {
  readonly none?: number
  readonly float16?: number
}

/**
 * The group's codec: one some member has not measured yet comes first (none, then float16), so a
 * new group learns both in two rounds; otherwise the one whose slowest member's time is least (the
 * round ends with its slowest member), float16 only when FLOAT16_MARGIN times none's or less.
 */
export function chooseCodec (members: readonly CodecTimes[]): AutoCodec {
  for (const c of AUTO_CODECS) if (members.some(m => !(m[c] !== undefined && m[c] > 0))) return c
  const worst = (c: AutoCodec): number => Math.max(...members.map(m => m[c] as number))
  return worst('float16') < FLOAT16_MARGIN * worst('none') ? 'float16' : 'none'
}

/** One member's memory of its all-reduce times per codec. */
export class CodecClock {
  private readonly seconds: Partial<Record<AutoCodec, number>> = {}
  private readonly idle: Record<AutoCodec, number> = { none: 0, float16: 0 }
  /** Rounds a codec may go unused before it is probed again (backs off while probes lose). */
  private readonly wait: Record<AutoCodec, number> = { none: REPROBE_ROUNDS, float16: REPROBE_ROUNDS }
  /** The codec's estimate was dropped: its next measured round is a probe. */
  private readonly probing: Record<AutoCodec, boolean> = { none: false, float16: false }
  /** A codec's estimate when the other was last measured, to notice a changed link. */
  private readonly whenOtherMeasured: Partial<Record<AutoCodec, number>> = {}

  get times (): CodecTimes { return { ...this.seconds } }

  /** Rounds a codec may now go unused before it is probed again. */
  reprobeAfter (codec: AutoCodec): number { return this.wait[codec] }

  /** After a round with `codec` that took `seconds` (moving average, half-half). */
  record (codec: AutoCodec, seconds: number): void {
    if (!(seconds > 0) || !Number.isFinite(seconds)) return
    const old = this.seconds[codec]
    this.seconds[codec] = old === undefined ? seconds : (old + seconds) / 2
    const other: AutoCodec = codec === 'none' ? 'float16' : 'none'
    if (this.probing[codec]) {
      this.probing[codec] = false
      const won = this.seconds[other] === undefined || chooseCodec([this.seconds]) === codec
      this.wait[codec] = won ? REPROBE_ROUNDS : Math.min(2 * this.wait[codec], MAX_REPROBE_ROUNDS)
    }
    if (this.seconds[other] !== undefined) this.whenOtherMeasured[other] = this.seconds[other]
    this.idle[codec] = 0
    this.idle[other] += 1
    const then = this.whenOtherMeasured[codec]
    const ratio = then === undefined ? 1 : this.seconds[codec] / then
    const changed = ratio >= CHANGED_RATIO || ratio <= 1 / CHANGED_RATIO
    if (this.seconds[other] !== undefined && (changed || this.idle[other] >= this.wait[other])) {
      if (changed) {
        // The old average is stale too: start the codec in use again from this round.
        this.seconds[codec] = seconds
        this.wait[other] = REPROBE_ROUNDS
      }
      delete this.seconds[other]
      delete this.whenOtherMeasured[codec]
      this.probing[other] = true
      this.idle[other] = 0
    }
  }
}
