/**
 * The Moshpit convergence benchmark (npm run bench:moshpit -- --help). N peers on a Moshpit grid
 * (groups of g, log2(N/g) group bits) start from seeded random vectors; every round each live peer
 * runs one step(); after each round the coordinator measures how far the live peers are from their
 * mean, until that is below the threshold or rounds run out. Optionally some peers are crashed
 * (SIGKILL) in one round, once their group is assembled. Host protocol: bench/lib/moshpit-coordinator.ts.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { createWriteStream, mkdirSync, writeFileSync } from 'node:fs'
import { cpus, loadavg, totalmem, platform, release } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Command } from 'commander'
import { MoshpitCoordinator, type KillRecord, type RoundRecord } from './lib/moshpit-coordinator.js'
import { chooseVictims, gridDimensions, initialGroupBits, initialVectors } from './lib/moshpit-math.js'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..')
const progress = (line: string): void => { process.stderr.write(`[moshpit ${new Date().toISOString().slice(11, 19)}] ${line}\n`) }
const list = (text: string): string[] => text.split(',').map((s) => s.trim()).filter((s) => s !== '')

interface Impl {
  readonly name: string
  readonly command: readonly string[]
  /** ranks one host process runs */
  readonly ranksPerHost: (o: Settings) => number
  readonly note: (o: Settings) => string
}

interface Settings {
  peers: number
  groupSize: number
  minGroupSize: number
  elements: number
  threshold: number
  maxRounds: number
  killRound: number
  seed: number
  hivemindPerHost: number
  stepTimeout: number
  allreduceTimeout: number
  matchmakingTime: number
  requestTimeout: number
  timeoutS: number
  logDir: string
}

const IMPLS: readonly Impl[] = [
  {
    name: 'ours',
    command: ['node_modules/.bin/node', 'dist/bench/peers/ours_moshpit.js'],
    ranksPerHost: () => 1,
    note: (o) => `one process per peer; DecentralizedAverager targetGroupSize ${o.groupSize}, minGroupSize ${o.minGroupSize}, averagingExpiration ${o.matchmakingTime} s, requestTimeout ${o.requestTimeout} s, allreduceTimeout ${o.allreduceTimeout} s, compression none, step timeout ${o.stepTimeout} s`
  },
  {
    name: 'hivemind',
    command: ['bench/.venv/bin/python', 'bench/peers/hivemind_moshpit.py'],
    ranksPerHost: (o) => o.hivemindPerHost,
    note: (o) => `hivemind 1.1.12, ${o.hivemindPerHost} peers per Python process (each its own DHT process, p2pd and averager process); target_group_size ${o.groupSize}, min_group_size ${o.minGroupSize}, min_matchmaking_time ${o.matchmakingTime} s, request_timeout ${o.requestTimeout} s, allreduce_timeout ${o.allreduceTimeout} s, compression none, step timeout ${o.stepTimeout} s`
  }
]

interface RunOutcome {
  readonly impl: string
  readonly peers: number
  readonly failures: number
  readonly victims: readonly number[]
  readonly status: string
  readonly setupS: number
  readonly rounds: readonly RoundRecord[]
  readonly kills: readonly KillRecord[]
  readonly converged: boolean
  readonly note: string
}

function killTree (child: ChildProcess): void {
  if (child.pid == null || child.exitCode != null || child.signalCode != null) return
  try { process.kill(-child.pid, 'SIGKILL') } catch { /* already gone */ }
}

async function runOne (impl: Impl, failures: number, o: Settings): Promise<RunOutcome> {
  const perHost = impl.ranksPerHost(o)
  const hosts = Math.ceil(o.peers / perHost)
  const victims = chooseVictims(o.peers, failures, o.seed)
  const label = `${impl.name} ${o.peers} peers, ${failures} crashed`
  let readyAt = 0
  const coordinator = new MoshpitCoordinator({
    world: o.peers,
    hosts,
    vectors: initialVectors(o.peers, o.elements, o.seed),
    bits: Array.from({ length: o.peers }, (_, r) => initialGroupBits(r, o.peers, o.groupSize)),
    threshold: o.threshold,
    maxRounds: o.maxRounds,
    victims,
    killRound: failures > 0 ? o.killRound - 1 : -1
  }, (line) => {
    if (line === 'every host is ready') readyAt = performance.now()
    progress(`${label}: ${line}`)
  })
  const coord = await coordinator.start()
  const started = performance.now()
  progress(`${label}: starting ${hosts} host processes (${perHost} peer(s) each)${failures > 0 ? `, crashing ranks ${victims.join(',')} in round ${o.killRound}` : ''}`)
  const children: ChildProcess[] = []
  const exits: Array<Promise<void>> = []
  const unexpected: string[] = []
  let timedOut = false
  let stopped = false
  const timer = setTimeout(() => { timedOut = true; for (const c of children) killTree(c) }, o.timeoutS * 1000)
  for (let host = 0; host < hosts; host++) {
    // Ranks interleaved over hosts (rank r on host r mod H), so groups span processes.
    const ranks = Array.from({ length: o.peers }, (_, r) => r).filter((r) => r % hosts === host)
    const logPath = join(o.logDir, `moshpit-${impl.name}-${o.peers}p-${failures}f-host${host}.log`)
    const log = createWriteStream(logPath)
    const child = spawn(impl.command[0], impl.command.slice(1), {
      cwd: ROOT,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        BENCH_COORD: coord,
        BENCH_HOST: String(host),
        BENCH_RANKS: ranks.join(','),
        BENCH_GROUP_SIZE: String(o.groupSize),
        BENCH_MIN_GROUP_SIZE: String(o.minGroupSize),
        BENCH_STEP_TIMEOUT: String(o.stepTimeout),
        BENCH_ALLREDUCE_TIMEOUT: String(o.allreduceTimeout),
        BENCH_MATCHMAKING_TIME: String(o.matchmakingTime),
        BENCH_REQUEST_TIMEOUT: String(o.requestTimeout),
        PYTHONUNBUFFERED: '1'
      }
    })
    let tail = ''
    const keep = (chunk: Buffer): void => { tail = (tail + chunk.toString('utf8')).slice(-4096) }
    child.stdout!.on('data', keep)
    child.stderr!.on('data', keep)
    child.stdout!.pipe(log, { end: false })
    child.stderr!.pipe(log, { end: false })
    children.push(child)
    exits.push(new Promise((resolve) => {
      child.once('error', (err) => { unexpected.push(`host ${host} could not start: ${err.message}`); resolve() })
      child.once('close', (code, signal) => {
        log.end()
        if (code !== 0 && !timedOut && !stopped) {
          const allVictims = ranks.every((r) => victims.includes(r))
          const why = /crashing on purpose: (.*)/.exec(tail)?.[1]
          if (allVictims && why != null) coordinator.hostGone(host, `crashed on purpose: ${why}`)
          else {
            unexpected.push(`host ${host} (ranks ${ranks.join(',')}): ${coordinator.errors.get(host) ?? `exited with ${code ?? signal ?? '?'} (see ${logPath})`}`)
            coordinator.hostGone(host, 'its process failed')
          }
        }
        resolve()
      })
    }))
    // Stagger the starts a little: 64 runtimes loading at once on 2 cores time out their first dials.
    await new Promise((resolve) => setTimeout(resolve, impl.name === 'ours' ? 300 : 500))
  }
  await Promise.race([coordinator.done, Promise.all(exits)])
  stopped = true // from here on a host is only leaving: a slow shutdown ended by the grace timer is no failure
  // Hosts exit on their own after the stop; give them 20 s to shut their averagers down.
  const grace = setTimeout(() => { for (const c of children) killTree(c) }, 20_000)
  await Promise.all(exits)
  clearTimeout(grace)
  clearTimeout(timer)
  await coordinator.stop()

  const rounds = coordinator.rounds
  const setupS = ((readyAt === 0 ? performance.now() : readyAt) - started) / 1000
  const converged = coordinator.converged
  let status: string
  if (timedOut) status = `timeout after ${o.timeoutS} s`
  else if (unexpected.length > 0) status = `failed: ${unexpected.join('; ')}`
  else if (converged) status = 'converged'
  else status = `not converged in ${rounds.length} rounds`
  return { impl: impl.name, peers: o.peers, failures, victims, status, setupS, rounds, kills: coordinator.kills, converged, note: impl.note(o) }
}

const sci = (v: number): string => Number.isNaN(v) ? '–' : v === 0 ? '0' : v.toExponential(1)

function summaryTable (runs: readonly RunOutcome[]): string {
  const lines = [
    '| impl | peers | failures | rounds to < threshold | seconds | final max deviation | drift of live mean from initial mean | setup s | status |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---|'
  ]
  for (const r of runs) {
    const last = r.rounds.at(-1)
    const seconds = r.rounds.reduce((s, x) => s + x.seconds, 0)
    lines.push(`| ${r.impl} | ${r.peers} | ${r.failures} | ${r.converged ? r.rounds.length : '–'} | ${r.rounds.length > 0 ? seconds.toFixed(1) : '–'} | ${last != null ? sci(last.maxDeviation) : '–'} | ${last != null ? sci(last.driftFromInitialMean) : '–'} | ${r.setupS.toFixed(0)} | ${r.status.replace(/\|/g, '/')} |`)
  }
  return lines.join('\n')
}

function roundsTable (r: RunOutcome): string {
  const lines = [
    `${r.impl}, ${r.peers} peers, ${r.failures} crashed${r.failures > 0 ? ` (ranks ${r.victims.join(', ')})` : ''}:`,
    '',
    '| round | live | averaged | failed steps | ranks by group size | max deviation | drift from initial mean | drift from survivors\' initial mean | s |',
    '|---:|---:|---:|---:|---|---:|---:|---:|---:|'
  ]
  for (const x of r.rounds) {
    const sizes = Object.entries(x.groupSizes).map(([size, n]) => `${n}×${size}`).join(' ') || '–'
    lines.push(`| ${x.round + 1} | ${x.live} | ${x.okSteps} | ${x.failedSteps} | ${sizes} | ${sci(x.maxDeviation)} | ${sci(x.driftFromInitialMean)} | ${sci(x.driftFromSurvivorsInitialMean)} | ${x.seconds.toFixed(2)} |`)
  }
  const errors = [...new Set(r.rounds.flatMap((x) => x.errors))]
  if (errors.length > 0) lines.push('', `Step errors seen: ${errors.slice(0, 5).map((e) => `"${e}"`).join('; ')}`)
  const whens = new Map<string, number>()
  for (const k of r.kills) whens.set(k.when, (whens.get(k.when) ?? 0) + 1)
  if (whens.size > 0) lines.push('', `Crashes: ${[...whens].map(([w, n]) => `${n} ${w}`).join('; ')}`)
  return lines.join('\n')
}

async function main (): Promise<void> {
  const program = new Command()
    .name('bench:moshpit')
    .description('Moshpit convergence: N peers on a grid of groups, rounds and seconds until every live peer is within the threshold of the live mean.')
    .option('--impl <list>', 'ours, hivemind (comma-separated)', 'ours,hivemind')
    .option('--peers <n>', 'peers (world ÷ group size and the group size must be powers of two)', '64')
    .option('--group-size <n>', 'target group size', '4')
    .option('--min-group-size <n>', 'smallest group that may average', '2')
    .option('--elements <n>', 'float32 elements per peer', '1000')
    .option('--failures <list>', 'crashed peers per run, comma-separated (one run each)', '0,6')
    .option('--kill-round <n>', 'the round (1-based) in which the victims crash, once their group is assembled', '2')
    .option('--threshold <x>', 'max deviation from the live mean that counts as converged', '1e-6')
    .option('--max-rounds <n>', 'rounds before giving up', '10')
    .option('--seed <n>', 'seed of the initial vectors and of the victims', '1')
    .option('--hivemind-per-host <n>', 'hivemind peers per Python process', '8')
    .option('--step-timeout <s>', 'seconds one step() may take', '30')
    .option('--allreduce-timeout <s>', 'all-reduce timeout of both implementations', '20')
    .option('--matchmaking-time <s>', "ours' averagingExpiration = hivemind's min_matchmaking_time", '5')
    .option('--request-timeout <s>', 'request_timeout of both', '3')
    .option('--timeout <s>', 'seconds one run may take', '900')
    .option('--out <file>', 'also write the report to this markdown file')
    .option('--logs <dir>', 'where host processes write their output', 'bench/results/logs')
  program.parse()
  const opts = program.opts<Record<string, string>>()
  const num = (name: string): number => {
    const v = Number(opts[name])
    if (!Number.isFinite(v) || v < 0) throw new Error(`--${name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} must be a non-negative number, got "${opts[name]}"`)
    return v
  }
  const o: Settings = {
    peers: num('peers'),
    groupSize: num('groupSize'),
    minGroupSize: num('minGroupSize'),
    elements: num('elements'),
    threshold: num('threshold'),
    maxRounds: num('maxRounds'),
    killRound: num('killRound'),
    seed: num('seed'),
    hivemindPerHost: num('hivemindPerHost'),
    stepTimeout: num('stepTimeout'),
    allreduceTimeout: num('allreduceTimeout'),
    matchmakingTime: num('matchmakingTime'),
    requestTimeout: num('requestTimeout'),
    timeoutS: num('timeout'),
    logDir: resolve(ROOT, opts.logs)
  }
  initialGroupBits(0, o.peers, o.groupSize) // validates the grid
  const impls = list(opts.impl).map((name) => {
    const impl = IMPLS.find((i) => i.name === name)
    if (impl == null) throw new Error(`unknown implementation "${name}"; known: ${IMPLS.map((i) => i.name).join(', ')}`)
    return impl
  })
  mkdirSync(o.logDir, { recursive: true })
  const load = (): string => loadavg().map((l) => l.toFixed(2)).join(' ')
  const loadBefore = load()
  const runs: RunOutcome[] = []
  for (const failures of list(opts.failures).map(Number)) {
    for (const impl of impls) runs.push(await runOne(impl, failures, o))
  }
  const cpu = cpus()
  const dims = gridDimensions(o.peers, o.groupSize)
  const report = [
    `Moshpit grid: ${o.peers} peers in groups of ${o.groupSize} (${Math.log2(o.peers / o.groupSize)} group bits, initial bits of rank r = bin(r ÷ ${o.groupSize}); a full grid mixes everyone in ${dims} rounds), ` +
      `${o.elements} float32 per peer uniform in [-1, 1) (seed ${o.seed}), weight 1 each; converged when max |x − mean of the live peers| < ${o.threshold}, at most ${o.maxRounds} rounds. ` +
      'Crashed peers get SIGKILL in their round once matchmaking assembled their group; deviation is then measured among the survivors against the survivors\' current mean.',
    `Machine: ${cpu.length} × ${cpu[0]?.model ?? '?'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, ${platform()} ${release()}, Node ${process.version}; load average ${loadBefore} before, ${load()} after.`,
    '',
    summaryTable(runs),
    '',
    ...runs.map((r) => `- ${r.impl}: ${r.note}`),
    '',
    'Per round:',
    '',
    ...runs.flatMap((r) => [roundsTable(r), '']),
    `Reproduce: \`npm run bench:moshpit -- ${process.argv.slice(2).join(' ')}\``.replace(' -- `', '`')
  ].join('\n')
  process.stdout.write(report + '\n')
  if (opts.out != null) {
    const path = resolve(process.cwd(), opts.out)
    mkdirSync(dirname(path), { recursive: true })
    writeFileSync(path, `# Moshpit convergence (${new Date().toISOString().slice(0, 16)}Z)\n\n${report}\n`)
    progress(`report written to ${path}`)
  }
}

main().catch((err: Error) => {
  process.stderr.write(`bench:moshpit: ${err.message}\n`)
  process.exit(1)
})
