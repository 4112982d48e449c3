/** Pure arithmetic and formatting of the benchmark table: results in, markdown out. */
import type { PeerResult } from './protocol.js'

export type RunStatus = 'ok' | 'missing' | 'skipped' | 'failed' | 'timeout'

/** One (implementation, peers, elements) run as the runner saw it. */
export interface RunOutcome {
  readonly impl: string
  readonly peers: number
  /** peers per averaging group; equal to peers for one all-reduce over everyone */
  readonly groupSize: number
  readonly elements: number
  readonly status: RunStatus
  /** why a run is not ok, one sentence per failing peer */
  readonly message?: string
  readonly results: readonly PeerResult[]
  /** TCP bytes a peer sent to the others per measured round, mean over peers, from the kernel's counters (bench/lib/wire-bytes.ts) */
  readonly wireBytesPerRoundPerPeer?: number
}

export interface RunStats {
  /** median over rounds of the slowest peer's whole round (what a caller of step/all_reduce waits) */
  readonly roundMs: number
  /** median over rounds of the slowest peer's matchmaking, when the implementation reports it */
  readonly matchmakingMs: number | null
  /** median over rounds of the slowest peer's round less its matchmaking: the data movement and arithmetic */
  readonly allReduceMs: number
  /** nccl-tests: bytes per peer / all-reduce time */
  readonly algbwMiBs: number
  /** nccl-tests: algbw · 2(n-1)/n, n = the group size */
  readonly busbwMiBs: number
  readonly cpuSecondsPerRound: number
  readonly mainThreadCpuSecondsPerRound: number | null
  readonly peakRssMiB: number
  readonly maxAbsError: number | null
}

const MiB = 1024 * 1024

export function median (values: readonly number[]): number {
  if (values.length === 0) return Number.NaN
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
}

/** Per round, the largest value over peers: a collective is done when its slowest member is. */
function slowestPerRound (perPeer: ReadonlyArray<readonly number[]>): number[] {
  const rounds = Math.min(...perPeer.map((r) => r.length))
  return Array.from({ length: rounds }, (_, k) => Math.max(...perPeer.map((r) => r[k])))
}

function errorValue (value: number | string | null): number | null {
  if (value == null) return null
  return typeof value === 'number' ? value : Number(value)
}

export function statsOf (run: RunOutcome): RunStats | null {
  if (run.status !== 'ok' || run.results.length === 0) return null
  const results = run.results
  const rounds = slowestPerRound(results.map((r) => r.roundsMs))
  const withMatchmaking = results.every((r) => r.matchmakingMs != null && r.matchmakingMs.length === r.roundsMs.length)
  const matchmaking = withMatchmaking ? slowestPerRound(results.map((r) => r.matchmakingMs!)) : null
  const allReduce = withMatchmaking
    ? slowestPerRound(results.map((r) => r.roundsMs.map((ms, k) => ms - r.matchmakingMs![k])))
    : rounds
  const allReduceMs = median(allReduce)
  const algbwMiBs = (run.elements * 4 / MiB) / (allReduceMs / 1000)
  const errors = results.map((r) => errorValue(r.maxAbsError)).filter((e): e is number => e != null)
  return {
    roundMs: median(rounds),
    matchmakingMs: matchmaking != null ? median(matchmaking) : null,
    allReduceMs,
    algbwMiBs,
    busbwMiBs: algbwMiBs * 2 * (run.groupSize - 1) / run.groupSize,
    cpuSecondsPerRound: results.reduce((sum, r) => sum + r.cpuSeconds / Math.max(1, r.roundsMs.length), 0) / results.length,
    mainThreadCpuSecondsPerRound: results.every((r) => r.mainThreadCpuSeconds != null)
      ? results.reduce((sum, r) => sum + r.mainThreadCpuSeconds! / Math.max(1, r.roundsMs.length), 0) / results.length
      : null,
    peakRssMiB: Math.max(...results.map((r) => r.peakRssBytes)) / MiB,
    maxAbsError: errors.length > 0 ? Math.max(...errors) : null
  }
}

export function formatElements (elements: number): string {
  if (elements % 1_000_000 === 0) return `${elements / 1_000_000}M`
  if (elements % 1000 === 0) return `${elements / 1000}k`
  return String(elements)
}

/** Accepts 25000000, 25M, 1k. */
export function parseElements (text: string): number {
  const match = /^(\d+(?:\.\d+)?)([kKmM]?)$/.exec(text.trim())
  if (match == null) throw new Error(`"${text}" is not an element count (use e.g. 1000000 or 25M)`)
  const scale = { '': 1, k: 1e3, K: 1e3, m: 1e6, M: 1e6 }[match[2]] ?? 1
  const value = Math.round(Number(match[1]) * scale)
  if (value < 1) throw new Error(`element count must be at least 1, got "${text}"`)
  return value
}

const fixed = (value: number | null, digits: number): string => value == null || Number.isNaN(value) ? '–' : value.toFixed(digits)

function formatError (value: number | null): string {
  if (value == null) return 'n/a'
  if (!Number.isFinite(value)) return '**NaN/inf**'
  return value === 0 ? '0' : value.toExponential(1)
}

export function resultsTable (runs: readonly RunOutcome[]): string {
  const lines = [
    '| impl | peers | group | elements | round ms | matchmaking ms | all-reduce ms | algbw MiB/s | busbw MiB/s | wire MiB sent/round/peer | CPU s/round/peer | main thread CPU s | peak RSS MiB/peer | max abs error | status |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|'
  ]
  for (const run of runs) {
    const s = statsOf(run)
    const status = run.status === 'ok' ? 'ok' : `${run.status}: ${run.message ?? ''}`.replace(/\|/g, '/').replace(/\n/g, ' ')
    lines.push(s == null
      ? `| ${run.impl} | ${run.peers} | ${run.groupSize} | ${formatElements(run.elements)} | – | – | – | – | – | – | – | – | – | – | ${status} |`
      : `| ${run.impl} | ${run.peers} | ${run.groupSize} | ${formatElements(run.elements)} | ${fixed(s.roundMs, 0)} | ${fixed(s.matchmakingMs, 0)} | ${fixed(s.allReduceMs, 0)} | ${fixed(s.algbwMiBs, 0)} | ${fixed(s.busbwMiBs, 0)} | ${fixed(run.wireBytesPerRoundPerPeer != null ? run.wireBytesPerRoundPerPeer / MiB : null, (run.wireBytesPerRoundPerPeer ?? 0) < 10 * MiB ? 2 : 1)} | ${fixed(s.cpuSecondsPerRound, 3)} | ${fixed(s.mainThreadCpuSecondsPerRound, 3)} | ${fixed(s.peakRssMiB, 0)} | ${formatError(s.maxAbsError)} | ${status} |`)
  }
  return lines.join('\n')
}

/** Whether an implementation is one of ours (compared against the rest). */
export const isOurs = (impl: string): boolean => impl === 'ours' || impl.startsWith('ours-')

/**
 * ours ÷ each other implementation measured in the same run, on all-reduce time (matchmaking
 * excluded where reported): below 1 means ours is faster. A time ratio r is a bus-bandwidth ratio 1/r.
 */
export function ratioTable (runs: readonly RunOutcome[]): string | null {
  const others = [...new Set(runs.filter((r) => !isOurs(r.impl) && statsOf(r) != null).map((r) => r.impl))]
  const ours = runs.filter((r) => isOurs(r.impl) && statsOf(r) != null)
  if (ours.length === 0 || others.length === 0) return null
  const lines = [
    `| ours | peers | group | elements | ${others.map((o) => `÷ ${o}`).join(' | ')} |`,
    `|---|---:|---:|---:|${others.map(() => '---:').join('|')}|`
  ]
  for (const run of ours) {
    const mine = statsOf(run)!
    const cells = others.map((other) => {
      const theirs = runs.find((r) => r.impl === other && r.peers === run.peers && r.groupSize === run.groupSize && r.elements === run.elements)
      const s = theirs != null ? statsOf(theirs) : null
      return s == null ? '–' : `${(mine.allReduceMs / s.allReduceMs).toFixed(2)}×`
    })
    lines.push(`| ${run.impl} | ${run.peers} | ${run.groupSize} | ${formatElements(run.elements)} | ${cells.join(' | ')} |`)
  }
  return lines.join('\n')
}

/** The notes peers sent (one per implementation), shown under the table. */
export function notesOf (runs: readonly RunOutcome[]): string[] {
  const notes = new Map<string, string>()
  for (const run of runs) {
    const note = run.results.find((r) => r.note != null)?.note
    if (note != null && !notes.has(run.impl)) notes.set(run.impl, note)
  }
  return [...notes].map(([impl, note]) => `- ${impl}: ${note}`)
}
