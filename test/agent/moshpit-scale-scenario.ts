/**
 * The 256-peer test's swarm and rounds (moshpit-scale.integration.test.ts), run in a child process
 * by `runInChild` (in-child.ts says why): N agents in one process (bench/lib/scale-swarm.ts) on a
 * Moshpit grid, a few rounds, and what the test asserts gathered here: groups whose listed members
 * did not all run in them, members not holding their clean group's exact mean, the rounds' figures.
 */
import { startScaleSwarm, scaleConfig } from '../../bench/lib/scale-swarm.js'
import { runRounds, RoundProbe, formatRound, type RoundStats } from '../../bench/lib/scale-rounds.js'
import { gridGroupBits } from '../../agent/moshpit/group-bits.js'
import { seededRandom } from '../../agent/util/random.js'
import type { StepResult } from '../../agent/averager.js'
import { distanceToMean } from '../../bench/lib/moshpit-math.js'
import { linesLog, type Log } from '../../agent/log.js'
import { keptLines, testLog } from './test-log.js'

export interface GridScenarioInput {
  readonly peers: number
  readonly groupSize: number
  readonly rounds: number
  readonly seed: number
  readonly elements: number
  readonly timing: { readonly expiration: number, readonly request: number, readonly allreduce: number }
  readonly stepTimeout: number
}

export interface GridScenarioReport {
  /** Ghost or double members, and members of a clean group not holding its exact mean (the first 20). */
  readonly problems: string[]
  /** Why steps failed, most common first, per round; then each round's figures (formatRound). */
  readonly diagnostics: string[]
  readonly rounds: RoundStats[]
  /** Group memberships, and those of groups in which every member averaged every part (no part kept local, no sender left out). */
  readonly members: number
  readonly cleanMembers: number
  /** Mean squared distance of every value from the mean of all peers, before the first round and after the last. */
  readonly initialVariance: number
  readonly finalVariance: number
}

/** Lines kept per peer: at 256 peers the default 2000 (up to twice that held) would be ~150 MB of strings. */
const KEPT_LINES_PER_PEER = 400
const keptLogs = new Map<number, Log>()
function keptLog (rank: number): Log {
  let log = keptLogs.get(rank)
  if (log == null) { log = testLog(`peer ${rank}`, KEPT_LINES_PER_PEER); keptLogs.set(rank, log) }
  return log
}

export async function runGridScenario (input: GridScenarioInput): Promise<GridScenarioReport> {
  const random = seededRandom('scale-test')
  const probe = new RoundProbe()
  const swarm = await startScaleSwarm({
    peers: input.peers,
    name: `scale-test-${process.pid}`,
    seed: input.seed,
    latencyMs: 0,
    bootstrapDials: 3,
    config: (rank) => scaleConfig('scale', input.groupSize, gridGroupBits(rank, input.peers, input.groupSize), input.timing),
    tensor: () => Float32Array.from({ length: input.elements }, () => random() * 2 - 1),
    observer: probe.observer,
    // AVS_TEST_LOG=1 prints every averager's and rendezvous' log line, as the benchmark's command does;
    // without it each peer's last lines are kept and written out if the test fails (test-log.ts).
    ...(process.env.AVS_TEST_LOG != null
      ? {
          hooks: (rank: number) => ({ log: linesLog((msg) => { process.stderr.write(`${(performance.now() / 1000).toFixed(3)} [peer ${rank}] ${msg}\n`) }) }),
          rendezvousLog: (rank: number, msg: string) => { process.stderr.write(`${(performance.now() / 1000).toFixed(3)} [peer ${rank}] ${msg}\n`) }
        }
      : {
          hooks: (rank: number) => ({ log: keptLog(rank) }),
          rendezvousLog: (rank: number, msg: string) => { keptLog(rank).debug(msg) }
        })
  })
  try {
    const initialVariance = distanceToMean(swarm.tensors).variance
    const problems: string[] = []
    const diagnostics: string[] = []
    let cleanMembers = 0
    let members = 0
    const ids = swarm.nodes.map(n => n.peerId.toString())
    const { rounds } = await runRounds(swarm, {
      maxRounds: input.rounds, crashRate: 0, threshold: 0, stepTimeout: input.stepTimeout, seed: input.seed, probe, victims: new Set(),
      onRound: (round, results: ReadonlyMap<number, StepResult>, before, failures) => {
        // Why steps failed, most common first (numbers and ids taken out so that alike errors count together).
        const why = new Map<string, number>()
        for (const message of failures.values()) { const k = message.replace(/\b[0-9a-zA-Z]{40,}\b|\d+(\.\d+)?/g, '#').slice(0, 160); why.set(k, (why.get(k) ?? 0) + 1) }
        for (const [k, n] of [...why].sort((a, b) => b[1] - a[1]).slice(0, 4)) diagnostics.push(`round ${round}: ${n} steps failed: ${k}`)
        const byGroup = new Map<string, number[]>()
        for (const [rank, r] of results) byGroup.set(r.groupId, [...(byGroup.get(r.groupId) ?? []), rank])
        for (const [groupId, ranks] of byGroup) {
          const listed = results.get(ranks[0])?.peers ?? []
          // Every listed member ran in this group, and only there (no ghosts, nobody in two groups).
          const ran = listed.map(p => ids.indexOf(p)).sort((a, b) => a - b)
          if (ran.join() !== [...ranks].sort((a, b) => a - b).join()) {
            // Says what each member listed but absent did, and how the members present ended their round.
            const absent = ran.filter(rank => !ranks.includes(rank)).map(rank => {
              const elsewhere = results.get(rank)
              return elsewhere != null ? `${rank} ran in group ${elsewhere.groupId.slice(0, 8)}` : `${rank}'s step failed: ${failures.get(rank) ?? 'no outcome'}`
            })
            const present = ranks.map(rank => { const a = results.get(rank)!.allreduce; return `${rank}: kept local ${a.partsKeptLocal}, left out ${a.bannedSenders.length}, repaired ${a.repairedParts}` })
            problems.push(`round ${round}: group ${groupId.slice(0, 8)} lists ranks ${ran.join()} but ${ranks.join()} ran in it (${[...absent, ...present].join('; ')})` +
              // What the absent members and those present said of each other: which path made the ghost (a failure in CI is read, not rerun).
              ghostLines(ran.filter(rank => !ranks.includes(rank)), ranks, ids))
          }
          members += ranks.length
          if (ranks.some(rank => { const a = results.get(rank)?.allreduce; return a == null || a.partsKeptLocal > 0 || a.bannedSenders.length > 0 })) continue
          // A clean round leaves every member with the exact mean of the members' inputs.
          for (let i = 0; i < before[0].length; i++) {
            const mean = ranks.reduce((sum, rank) => sum + before[rank][i], 0) / ranks.length
            for (const rank of ranks) {
              if (Math.abs(swarm.tensors[rank][i] - mean) > 1e-6) problems.push(`round ${round}: rank ${rank} holds ${swarm.tensors[rank][i]} at ${i}, its group's mean is ${mean}`)
            }
          }
          cleanMembers += ranks.length
        }
      }
    })
    for (const r of rounds) diagnostics.push(formatRound(r))
    return { problems: problems.slice(0, 20), diagnostics, rounds, members, cleanMembers, initialVariance, finalVariance: distanceToMean(swarm.tensors).variance }
  } finally {
    await swarm.stop()
  }
}

/** The last lines in which each absent member mentions a member present, and each present one mentions an absent one (peer ids end in their last 6 characters in logs). */
function ghostLines (absent: readonly number[], present: readonly number[], ids: readonly string[]): string {
  if (process.env.AVS_TEST_LOG != null) return ''
  const tail = (rank: number, others: readonly number[]): string[] => {
    const marks = others.map(r => ids[r].slice(-6))
    return keptLines(`peer ${rank}`).filter(line => marks.some(m => line.includes(m))).slice(-GHOST_LINES_EACH)
  }
  const lines = [...absent.flatMap(r => tail(r, present)), ...present.flatMap(r => tail(r, absent))]
  return lines.length > 0 ? `; their log lines:\n${lines.join('\n')}` : '; no log lines of theirs mention each other'
}
const GHOST_LINES_EACH = 6
