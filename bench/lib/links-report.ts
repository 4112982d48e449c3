/** The shaped-links table (bench/links.ts): rows in, markdown out. */
import type { RunOutcome, RunStats } from './report.js'
import type { FlowRow } from './flow-sampler.js'

export interface LinksRow {
  /** With flowsEveryMs: every sender→receiver pair's progress, per measured round (flow-sampler.ts). */
  readonly flows?: ReadonlyArray<readonly FlowRow[]>
  readonly profile: string
  readonly rates: readonly number[]
  readonly impl: string
  readonly codec: string
  /** Where the row's peer logs (and flows.md) are. */
  readonly logDir: string
  readonly outcome: RunOutcome
  readonly stats: RunStats | null
  /** Busiest link at line rate with equal spans (ring all-reduce, undeclared bandwidth). */
  readonly floorEqualS: number
  /** The same with spans sized by the true rates: what no split beats. */
  readonly floorBestS: number
  /** tc's counters: bytes a peer sent + received per measured round, mean over peers. */
  readonly movedBytesPerRoundPerPeer: number | null
  /**
   * The busiest link direction's bytes per measured round as tbf counted them (payload, TLS and
   * protocol framing, TCP/IP headers, and the ACKs of the flows coming the other way), at line
   * rate: the least time those very bytes need. round ÷ this = how much of the round the busiest
   * link sat idle or under-used; round ÷ floorBestS also charges the bytes beyond the payload.
   */
  readonly wireFloorS: number | null
}

const f = (x: number, digits = 2): string => Number.isFinite(x) ? x.toFixed(digits) : '–'

/** Slowest peer's time in each measured round, in seconds. */
export function slowestRoundsS (outcome: RunOutcome): number[] {
  const results = outcome.results
  if (results.length === 0) return []
  const n = Math.min(...results.map(r => r.roundsMs.length))
  return Array.from({ length: n }, (_, k) => Math.max(...results.map(r => r.roundsMs[k])) / 1000)
}

export function linksTable (rows: readonly LinksRow[]): string {
  const lines = [
    '| links (Mbit/s) | impl | codec | round s (median, slowest peer) | each round s | floor s (equal / best split) | ÷ best floor | ÷ wire floor | hivemind ÷ ours | CPU s/round/peer | CPU s/GB moved | MB moved/round/peer | max abs error |',
    '|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|'
  ]
  for (const r of rows) {
    const links = `${r.profile} (${r.rates.join(',')})`
    if (r.stats == null) {
      lines.push(`| ${links} | ${r.impl} | ${r.codec} | ${r.outcome.status}: ${(r.outcome.message ?? '').replace(/\|/g, '/').slice(0, 200)} | | | | | | | | | |`)
      continue
    }
    const s = r.stats
    const roundS = s.roundMs / 1000
    const ours = rows.find(o => o.profile === r.profile && o.impl === 'ours' && o.codec === r.codec && o.stats != null)
    const vsOurs = r.impl === 'hivemind' && ours != null ? f(roundS / (ours.stats!.roundMs / 1000)) : ''
    const floors = Math.abs(r.floorEqualS - r.floorBestS) < 1e-9 ? f(r.floorBestS) : `${f(r.floorEqualS)} / ${f(r.floorBestS)}`
    const moved = r.movedBytesPerRoundPerPeer
    const perGB = moved != null && moved > 0 ? f(s.cpuSecondsPerRound / (moved / 1e9)) : '–'
    const err = s.maxAbsError == null ? 'n/a' : s.maxAbsError.toExponential(1)
    lines.push(`| ${links} | ${r.impl} | ${r.codec} | ${f(roundS)} | ${slowestRoundsS(r.outcome).map(x => f(x)).join(', ')} | ${floors} | ${f(roundS / r.floorBestS)} | ${r.wireFloorS != null ? f(roundS / r.wireFloorS) : '–'} | ${vsOurs} | ${f(s.cpuSecondsPerRound)} | ${perGB} | ${moved != null ? f(moved / 1e6, 0) : '–'} | ${err} |`)
  }
  const notes = [...new Set(rows.flatMap(r => r.outcome.results.map(p => p.note).filter((n): n is string => n != null).map(n => `${r.impl} ${r.codec} (${r.profile}): ${n}`)))]
  return [...lines, '', ...notes.map(n => `- ${n}`)].join('\n')
}
