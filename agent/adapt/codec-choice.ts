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

/** A codec not used for this many rounds loses its estimate and is tried again: links change. */
export const REPROBE_ROUNDS = 10

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

  get times (): CodecTimes { return { ...this.seconds } }

  /** After a round with `codec` that took `seconds` (moving average, half-half). */
  record (codec: AutoCodec, seconds: number): void {
    if (!(seconds > 0) || !Number.isFinite(seconds)) return
    const old = this.seconds[codec]
    this.seconds[codec] = old === undefined ? seconds : (old + seconds) / 2
    for (const c of AUTO_CODECS) {
      this.idle[c] = c === codec ? 0 : this.idle[c] + 1
      if (this.idle[c] >= REPROBE_ROUNDS) { delete this.seconds[c]; this.idle[c] = 0 }
    }
  }
}
