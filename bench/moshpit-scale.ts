/**
 * Moshpit matchmaking at scale (npm run bench:moshpit-scale -- --help): N agents in ONE process
 * (bench/lib/scale-swarm.ts: the agent's DHT, rendezvous, matchmaking and all-reduce over libp2p's
 * in-memory transport, plaintext), or with `--procs P` spread over P worker processes joined by
 * loopback TCP, plaintext (bench/lib/scale-procs.ts; workers re-run this file with `--worker <k>`,
 * so it works bundled into one file), tiny tensors, on the grid the agent lays out by rank
 * (gridGroupBits). Per round: distance to the live mean (largest, and the variance: the Moshpit
 * paper's measure), groups formed and whether they mixed the last round's, matchmaking latency,
 * rendezvous and DHT lookups, control traffic per peer. Beside each run, what the grid rule alone
 * reaches with the same crashes (bench/lib/moshpit-rule.ts): how much of the distance is the rule's.
 */
import { Command, Option } from 'commander'
import { cpus, loadavg, platform, release } from 'node:os'
import { startScaleSwarm, scaleConfig, TrafficCounter, type ScaleSwarm } from './lib/scale-swarm.js'
import { runRounds, RoundProbe, formatSizes, type RoundStats } from './lib/scale-rounds.js'
import { gridGroupBits } from '../agent/moshpit/group-bits.js'
import { seededRandom } from '../agent/util/random.js'
import { linesLog } from '../agent/log.js'
import { runProcs, runWorker } from './lib/scale-procs.js'
import { ruleMedians } from './lib/moshpit-rule.js'
import { defaultGroupSize, gridDimensions } from './lib/moshpit-math.js'
import { numberList } from './lib/cli.js'
import { elementsPerPart } from '../agent/allreduce/partition.js'
import { noneCodec } from '../agent/compression/none.js'

const progress = (line: string): void => { process.stderr.write(`[moshpit-scale ${new Date().toISOString().slice(11, 19)}] ${line}\n`) }


export interface ScaleRun {
  readonly peers: number
  readonly groupSize: number
  readonly crashPercent: number
  readonly run: number
  readonly setupS: number
  readonly tableMin: number
  readonly rounds: readonly RoundStats[]
  readonly convergedAt: number | null
}

export interface ScaleSettings {
  readonly elements: number
  readonly maxRounds: number
  /** Stop once every live peer is within this of the live mean. */
  readonly threshold: number
  /** Only reported: the first round whose variance is below it. */
  readonly varianceThreshold: number
  readonly expiration: number
  readonly request: number
  readonly allreduce: number
  readonly stepTimeout: number
  readonly latencyMs: number
  readonly seed: number
  /** Worker processes (1: every agent in this process, in memory). */
  readonly procs?: number
}

/** One swarm, its rounds, torn down. */
export async function scaleRun (peers: number, groupSize: number, crashPercent: number, run: number, s: ScaleSettings, log?: (line: string) => void): Promise<ScaleRun> {
  if ((s.procs ?? 1) > 1) {
    const seed = s.seed + 1000 * run + crashPercent
    const result = await runProcs(
      { peers, groupSize, seed, timing: { expiration: s.expiration, request: s.request, allreduce: s.allreduce }, bootstrapDials: 3 },
      s.procs ?? 1,
      { maxRounds: s.maxRounds, crashRate: crashPercent / 100, threshold: s.threshold, stepTimeout: s.stepTimeout },
      s.elements, log)
    return { peers, groupSize, crashPercent, run, ...result }
  }
  const probe = new RoundProbe()
  const traffic = new TrafficCounter()
  const victims = new Set<number>()
  let swarm: ScaleSwarm | undefined
  const seed = s.seed + 1000 * run + crashPercent
  const random = seededRandom(`${seed}:vectors`)
  swarm = await startScaleSwarm({
    peers,
    name: `scale-${peers}-${crashPercent}-${run}-${process.pid}`,
    seed,
    latencyMs: s.latencyMs,
    bootstrapDials: 3,
    config: (rank) => scaleConfig('scale', groupSize, gridGroupBits(rank, peers, groupSize), { expiration: s.expiration, request: s.request, allreduce: s.allreduce }),
    tensor: () => Float32Array.from({ length: s.elements }, () => random() * 2 - 1),
    hooks: (rank) => ({
      onGroup: () => { if (victims.has(rank)) swarm?.crash(rank) },
      // AVS_TEST_LOG=1 prints every averager's log line, as the test fixture does.
      ...(process.env.AVS_TEST_LOG != null ? { log: linesLog((msg) => { process.stderr.write(`${(performance.now() / 1000).toFixed(3)} [peer ${rank}] ${msg}\n`) }) } : {})
    }),
    observer: probe.observer,
    ...(process.env.AVS_TEST_LOG != null ? { rendezvousLog: (rank: number, msg: string) => { process.stderr.write(`${(performance.now() / 1000).toFixed(3)} [peer ${rank}] ${msg}\n`) } } : {}),
    traffic,
    progress: log
  })
  try {
    const result = await runRounds(swarm, {
      maxRounds: s.maxRounds, crashRate: crashPercent / 100, threshold: s.threshold, stepTimeout: s.stepTimeout,
      seed, probe, traffic, victims, progress: log,
      // Why a live peer's step failed (no group, a timeout): the first thing to read when a round is slow.
      onRound: (round, _results, _before, failures) => { for (const [rank, why] of failures) log?.(`round ${round}: peer ${rank}'s step failed: ${why}`) }
    })
    return { peers, groupSize, crashPercent, run, setupS: swarm.setupMs / 1000, tableMin: Math.min(...swarm.tables), ...result }
  } finally {
    await swarm.stop()
  }
}

function summaryRow (r: ScaleRun, s: ScaleSettings): string {
  const d = gridDimensions(r.peers, r.groupSize)
  const first = r.rounds[0]
  const mm95 = Math.max(...r.rounds.map(x => x.matchmakingP95))
  const lookups = r.rounds.reduce((a, x) => a + x.lookups, 0)
  const lookupsOk = lookups - r.rounds.reduce((a, x) => a + x.lookupsFailed, 0)
  const exchanges = r.rounds.reduce((a, x) => a + x.exchanges, 0)
  const exchangesFailed = r.rounds.reduce((a, x) => a + x.exchangesFailed, 0)
  const control = r.rounds.reduce((a, x) => a + x.controlBytes, 0) / Math.max(1, r.rounds.length)
  const messages = r.rounds.reduce((a, x) => a + x.controlMessages, 0) / Math.max(1, r.rounds.length)
  const last = r.rounds[r.rounds.length - 1]
  const varianceAt = r.rounds.find(x => x.variance < s.varianceThreshold)?.round ?? `not in ${r.rounds.length}`
  return `| ${r.peers} | ${r.groupSize} (d=${d}) | ${r.crashPercent} % | ${r.run} | ${r.convergedAt ?? `not in ${s.maxRounds}`} | ${varianceAt} | ` +
    `${last?.deviation.toExponential(1) ?? '-'} | ${last?.variance.toExponential(1) ?? '-'} | ` +
    `${first != null ? formatSizes(first.groupSizes) : '-'} | ${r.rounds.map(x => `${x.repeatedPairs}`).join('/')} | ${r.rounds.map(x => x.failedSteps).join('/')} | ${r.rounds.map(x => x.partialSteps).join('/')} | ` +
    `${mm95.toFixed(0)} ms | ${lookupsOk}/${lookups} | ${exchanges - exchangesFailed}/${exchanges} | ${messages.toFixed(0)} / ${(control / 1024).toFixed(1)} KiB | ` +
    `${r.setupS.toFixed(0)} s | ${r.rounds.map(x => (x.wallMs / 1000).toFixed(1)).join('/')} s | ${r.rounds.reduce((a, x) => a + x.cpuS, 0).toFixed(0)} s |`
}

/** Simulations of the grid rule per size and crash rate, their medians set beside each run. */
const RULE_SIMS = 20
type RuleFigures = ReturnType<typeof ruleMedians>

/**
 * The grid rule alone with the run's N, g, elements, part size and crashes per round
 * (Math.round(rate × live), as pickVictims draws them), rounds 1 to d + 1.
 */
function ruleFigures (peers: number, groupSize: number, crashPercent: number, s: ScaleSettings, grouping: 'grid' | 'random' = 'grid'): RuleFigures {
  const perPart = elementsPerPart(scaleConfig('scale', groupSize, '', s).partSizeBytes, noneCodec.bytesPerElement)
  return ruleMedians({
    peers, groupSize, elements: s.elements, rounds: grouping === 'grid' ? gridDimensions(peers, groupSize) + 1 : s.maxRounds, elementsPerPart: perPart,
    crashesPerRound: (live) => Math.round(crashPercent / 100 * live),
    grouping
  }, RULE_SIMS, `${s.seed}:${peers}:${groupSize}:${crashPercent}`)
}

/** Rows for every round ours ran: our variance beside the median of random groups with the same crashes, and ours ÷ theirs. */
function randomRows (r: ScaleRun, random: RuleFigures): string[] {
  return r.rounds.map(ours => {
    const theirs = random[ours.round - 1]
    const ratio = theirs.variance < 1e-24 ? '-' : (ours.variance / theirs.variance).toFixed(2)
    return `| ${r.peers} | ${r.groupSize} | ${r.crashPercent} % | ${r.run} | ${ours.round} | ${ours.variance.toExponential(1)} | ${theirs.variance.toExponential(1)} | ${ratio} |`
  })
}

/** Rows for rounds d and d + 1: ours, the rule's median, and ours ÷ the rule (none when the rule is exact or ours stopped). */
function ruleRows (r: ScaleRun, rule: RuleFigures): string[] {
  const d = gridDimensions(r.peers, r.groupSize)
  return [d, d + 1].map(round => {
    const ours = r.rounds.find(x => x.round === round)
    const theirs = rule[round - 1]
    const cells = (o: number | undefined, t: number, exact: number): string => {
      const ratio = o === undefined || t < exact ? '-' : (o / t).toFixed(2)
      const missing = r.convergedAt != null ? `stopped at ${r.convergedAt}` : 'not run'
      return `${o?.toExponential(1) ?? missing} | ${t.toExponential(1)} | ${ratio}`
    }
    return `| ${r.peers} | ${r.groupSize} (d=${d}) | ${r.crashPercent} % | ${r.run} | ${round} | ` +
      `${cells(ours?.deviation, theirs.deviation, 1e-12)} | ${cells(ours?.variance, theirs.variance, 1e-24)} |`
  })
}

async function main (): Promise<void> {
  const program = new Command()
    .name('bench:moshpit-scale')
    .description('Moshpit convergence and matchmaking of N agents in one process (in-memory libp2p, plaintext: protocols, not crypto), or over --procs worker processes (loopback TCP, plaintext).')
    .option('--peers <list>', 'swarm sizes', '16,64,256')
    .option('--group-size <n>', 'target group size (default: 32 for 1024 peers, else 4)')
    .option('--crash <list>', 'percent of live peers crashing per round, once their group assembled', '0')
    .option('--runs <n>', 'runs per size and crash rate', '1')
    .option('--elements <n>', 'float32 values per peer', '16')
    .option('--max-rounds <n>', 'rounds at most', '8')
    .option('--threshold <x>', 'converged when every live peer is within this of the live mean', '1e-6')
    .option('--variance-threshold <x>', 'reported: the first round whose variance (mean squared distance to the live mean, the Moshpit paper\'s measure) is below this', '1e-4')
    .option('--expiration <s>', 'averagingExpiration, seconds (the CRD default)', '15')
    .option('--request-timeout <s>', 'requestTimeout, seconds (the CRD default)', '3')
    .option('--allreduce-timeout <s>', 'allreduceTimeout, seconds', '20')
    .option('--step-timeout <s>', 'one step at most, seconds', '60')
    .option('--latency <ms>', 'added to every in-memory message', '0')
    .option('--seed <n>', 'seed', '1')
    .option('--procs <n>', 'worker processes hosting the agents (rank r in worker r mod P), joined by loopback TCP with plaintext; 1: all in this process, in memory', '1')
    .addOption(new Option('--worker <k>', 'internal: run as worker k of a --procs coordinator').hideHelp())
    .parse()
  const o = program.opts<Record<string, string>>()
  if (o.worker != null) { runWorker(Number(o.worker)); return }
  const procs = Number(o.procs)
  if (!Number.isInteger(procs) || procs < 1) throw new Error(`--procs ${o.procs}: a positive integer`)
  if (procs > 1 && Number(o.latency) > 0) throw new Error('--latency is the in-memory transport\'s: not with --procs > 1')
  const sizes = numberList(o.peers, '--peers', 2)
  const crashes = numberList(o.crash, '--crash', 0, 100)
  const s: ScaleSettings = {
    elements: Number(o.elements), maxRounds: Number(o.maxRounds), threshold: Number(o.threshold), varianceThreshold: Number(o.varianceThreshold),
    expiration: Number(o.expiration), request: Number(o.requestTimeout), allreduce: Number(o.allreduceTimeout),
    stepTimeout: Number(o.stepTimeout), latencyMs: Number(o.latency), seed: Number(o.seed), procs
  }
  progress(`${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${platform()} ${release()}, Node ${process.version}, load ${loadavg().map(l => l.toFixed(1)).join(' ')}`)
  const header = procs > 1
    ? `N agents spread over ${procs} worker processes (rank r in worker r mod ${procs}), joined by loopback TCP with PLAINTEXT connections; CPU summed over all processes`
    : 'N agents in one process, joined by libp2p\'s in-memory transport with PLAINTEXT connections'
  progress(header)
  // Each row as soon as its run is done: a run cut short (a device's time limit) keeps those before it.
  console.log(`${header}.\n`)
  console.log(`| peers | group (rounds of an exact grid) | crashing per round | run | rounds to ${o.threshold} | rounds to variance < ${o.varianceThreshold} | last deviation | last variance | round 1 groups | repeated pairs per round | peers without a group per round | partial steps per round | matchmaking p95 (worst round) | DHT lookups ok | rendezvous exchanges ok | control msgs / bytes per peer per round | setup | wall per round | CPU |`)
  console.log('|---:|---|---:|---:|---|---|---:|---:|---|---|---|---|---:|---:|---:|---:|---:|---|---:|')
  const rules = new Map<string, RuleFigures>()
  const randoms = new Map<string, RuleFigures>()
  const compared: string[] = []
  const againstRandom: string[] = []
  for (const peers of sizes) {
    const g = o.groupSize != null ? Number(o.groupSize) : defaultGroupSize(peers)
    for (const crash of crashes) {
      for (let run = 1; run <= Number(o.runs); run++) {
        progress(`${peers} peers, groups of ${g}, ${crash} % crashing per round, run ${run}`)
        const r = await scaleRun(peers, g, crash, run, s, progress)
        console.log(summaryRow(r, s))
        const rule = rules.get(`${peers}:${g}:${crash}`) ?? ruleFigures(peers, g, crash, s)
        rules.set(`${peers}:${g}:${crash}`, rule)
        progress(`the grid rule alone (median of ${RULE_SIMS}): ${rule.map(x => `round ${x.round} deviation ${x.deviation.toExponential(2)} variance ${x.variance.toExponential(2)}`).join(', ')}`)
        compared.push(...ruleRows(r, rule))
        const random = randoms.get(`${peers}:${g}:${crash}`) ?? ruleFigures(peers, g, crash, s, 'random')
        randoms.set(`${peers}:${g}:${crash}`, random)
        againstRandom.push(...randomRows(r, random))
      }
    }
  }
  console.log(`\nThe grid rule alone (bench/lib/moshpit-rule.ts): median of ${RULE_SIMS} seeded simulations with the run's N, g, ` +
    'elements, part size and crashes per round (round(rate × live)): the agent\'s gridGroupBits, nextGroupBits and spans, ' +
    'exact float64 group means, a victim crashing once its group assembled (the survivors average every span, the victim\'s ' +
    'too, as the agent\'s span repair does). Ours ÷ the rule above 1: our agents further from the mean than the rule itself leaves; "-": the rule exact.\n')
  console.log('| peers | group | crashing per round | run | after round | max deviation: ours | the rule | ours ÷ rule | variance: ours | the rule | ours ÷ rule |')
  console.log('|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
  for (const row of compared) console.log(row)
  console.log(`\nAgainst random groups (the Moshpit paper's baseline): median of ${RULE_SIMS} seeded simulations of the same N, g, ` +
    'elements and crashes, every live peer in a fresh random group of g each round (the rest a smaller group), exact means, span repair. ' +
    'Ours ÷ random groups below 1: our grid left the survivors closer to their mean than random groups would; "-": random groups exact.\n')
  console.log('| peers | group | crashing per round | run | after round | variance: ours | random groups | ours ÷ random |')
  console.log('|---:|---|---:|---:|---:|---:|---:|---:|')
  for (const row of againstRandom) console.log(row)
  console.log(`\nload after: ${loadavg().map(l => l.toFixed(1)).join(' ')}`)
}

// Run as a program (dist/bench/moshpit-scale.js, or bundled into moshpit-scale.mjs); a worker stays up until its coordinator leaves.
if (/moshpit-scale\.m?js$/.test(process.argv[1] ?? '')) {
  main().then(() => { if (!process.argv.includes('--worker')) process.exit(0) }, (err) => { process.stderr.write(`bench:moshpit-scale failed: ${err instanceof Error ? err.message : String(err)}\n`); process.exit(1) })
}
