/**
 * The all-reduce benchmark runner (npm run bench:allreduce -- --help). For every implementation,
 * peer count and tensor size it starts a coordinator on 127.0.0.1 and N peer processes, collects
 * their reports and prints one markdown table with ratios of ours against the others measured in
 * the same run. Protocol and column definitions: bench/README.md.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { createWriteStream, mkdirSync, writeFileSync } from 'node:fs'
import { cpus, totalmem, platform, release } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Command } from 'commander'
import { Coordinator } from './lib/coordinator.js'
import { envFor } from './lib/protocol.js'
import { IMPLS, implNamed, missingPart, type ImplSpec } from './lib/impls.js'
import { WireMeter } from './lib/wire-bytes.js'
import { formatElements, notesOf, parseElements, ratioTable, resultsTable, statsOf, type RunOutcome } from './lib/report.js'

/** The repository root: this file runs as dist/bench/allreduce.js. */
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..')

interface Options {
  impl: string
  peers: string
  elements: string
  rounds: string
  warmup: string
  partBytes: string
  compression: string
  timeout: string
  groupSize?: string
  out?: string
  logs: string
}

const progress = (line: string): void => { process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${line}\n`) }

const list = (text: string): string[] => text.split(',').map((s) => s.trim()).filter((s) => s !== '')

function positiveInt (text: string, what: string): number {
  const value = Number(text)
  if (!Number.isSafeInteger(value) || value < 0) throw new Error(`${what} must be a non-negative integer, got "${text}"`)
  return value
}

/** Ends a peer and everything it started (hivemind's averager process and p2pd): they share its process group. */
function killTree (child: ChildProcess): void {
  if (child.pid == null || child.exitCode != null || child.signalCode != null) return
  try { process.kill(-child.pid, 'SIGKILL') } catch { /* already gone */ }
}

async function runOne (spec: ImplSpec, peers: number, groupSize: number, elements: number, o: {
  rounds: number, warmup: number, partBytes: number, compression: string, timeoutS: number, logDir: string
}): Promise<RunOutcome> {
  const base = { impl: spec.name, peers, groupSize, elements }
  const missing = missingPart(spec, ROOT)
  if (missing != null) return { ...base, status: 'missing', message: missing, results: [] }
  if (groupSize !== peers && !spec.groups) return { ...base, status: 'skipped', message: 'averages all peers at once, no groups', results: [] }

  const label = `${spec.name} ${peers} peers${groupSize !== peers ? ` in groups of ${groupSize}` : ''} × ${formatElements(elements)}`
  const total = o.warmup + o.rounds
  const coordinator = new Coordinator(peers, (line) => progress(`${label}: ${line.replace(/^round-(\d+) open$/, (_m, k: string) => `round ${Number(k) + 1}/${total} ${Number(k) < o.warmup ? '(warm-up) ' : ''}started`)}`))
  const coord = await coordinator.start()
  // Bytes on the wire: the peers' TCP counters from just before the first measured round to after the last.
  const meter = new WireMeter()
  let wireBytes: number | null = null
  coordinator.beforeBarrierOpens = async (name) => {
    if (name === `round-${o.warmup}`) await meter.start(new Set(children.map((c) => c.pid).filter((pid): pid is number => pid != null)))
    if (name === 'done') wireBytes = await meter.stop()
  }
  progress(`${label}: starting (${o.warmup} warm-up + ${o.rounds} measured rounds, timeout ${o.timeoutS} s)`)
  const children: ChildProcess[] = []
  const exits: Array<Promise<number | null>> = []
  const failures: string[] = []
  let timedOut = false
  const timer = setTimeout(() => { timedOut = true; for (const c of children) killTree(c) }, o.timeoutS * 1000)

  for (let rank = 0; rank < peers; rank++) {
    const logPath = join(o.logDir, `${spec.name}-${peers}p-${formatElements(elements)}-rank${rank}.log`)
    const log = createWriteStream(logPath)
    const child = spawn(spec.command[0], spec.command.slice(1), {
      cwd: ROOT,
      detached: true, // own process group, so the whole tree can be ended
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        ...spec.env,
        ...envFor({ rank, world: peers, groupSize, elements, rounds: o.rounds, warmup: o.warmup, partBytes: o.partBytes, compression: o.compression, coord }),
        PYTHONUNBUFFERED: '1'
      }
    })
    child.stdout!.pipe(log, { end: false })
    child.stderr!.pipe(log, { end: false })
    children.push(child)
    exits.push(new Promise((resolve) => {
      child.once('error', (err) => { failures.push(`rank ${rank} could not start: ${err.message}`); resolve(null) })
      child.once('exit', (code, signal) => {
        log.end()
        if (code !== 0 && !timedOut) {
          const why = coordinator.errors.get(rank) ?? `exited with ${code ?? signal ?? '?'} (see ${logPath})`
          failures.push(`rank ${rank}: ${why}`)
          // A dead peer leaves the others waiting at a barrier: end them after a short grace.
          setTimeout(() => { for (const c of children) killTree(c) }, 5000)
        }
        resolve(code)
      })
    }))
  }

  await Promise.all(exits)
  clearTimeout(timer)
  await coordinator.stop()

  const results = [...coordinator.results.values()].sort((a, b) => a.rank - b.rank)
  if (timedOut) return { ...base, status: 'timeout', message: `no result within ${o.timeoutS} s (${results.length}/${peers} peers reported; logs in ${o.logDir})`, results }
  if (failures.length > 0 || results.length !== peers) {
    return { ...base, status: 'failed', message: failures.length > 0 ? failures.join('; ') : `${results.length}/${peers} peers reported`, results }
  }
  const outcome: RunOutcome = { ...base, status: 'ok', results, ...(wireBytes != null ? { wireBytesPerRoundPerPeer: wireBytes / peers / o.rounds } : {}) }
  const s = statsOf(outcome)!
  progress(`${label}: all-reduce ${s.allReduceMs.toFixed(0)} ms median, busbw ${s.busbwMiBs.toFixed(0)} MiB/s, max error ${String(s.maxAbsError)}`)
  return outcome
}

function machineLine (): string {
  const cpu = cpus()
  return `${cpu.length} × ${cpu[0]?.model ?? 'unknown CPU'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, ${platform()} ${release()}, Node ${process.version}`
}

async function main (): Promise<void> {
  const program = new Command()
    .name('bench:allreduce')
    .description('All-reduce benchmark: ours against hivemind, gloo and the transport floors, as separate processes on loopback.')
    .option('--impl <list>', `implementations, comma-separated: ${IMPLS.map((i) => i.name).join(', ')}`, 'ours,hivemind,gloo,tcp')
    .option('--peers <list>', 'peer counts, comma-separated', '2,4')
    .option('--elements <list>', 'float32 elements per peer, comma-separated (25M, 1000000, ...)', '1M,25M')
    .option('--rounds <n>', 'measured rounds (median is reported)', '5')
    .option('--warmup <n>', 'warm-up rounds, not measured', '1')
    .option('--group-size <n>', 'peers per averaging group (default: all peers in one group); only for implementations that form groups')
    .option('--part-bytes <n>', 'part size in bytes for implementations that stream parts', '65536')
    .option('--compression <name>', 'none | float16 | uniform8bit | blockwise8bit (implementations that cannot compress say so)', 'none')
    .option('--timeout <s>', 'seconds one run (one impl, peer count, size) may take before it is ended', '300')
    .option('--out <file>', 'also write the report (machine, command, tables) to this markdown file')
    .option('--logs <dir>', 'where each peer process writes its output', 'bench/results/logs')
  program.parse()
  const o = program.opts<Options>()
  const specs = list(o.impl).map(implNamed)
  const peerCounts = list(o.peers).map((p) => positiveInt(p, '--peers'))
  if (peerCounts.some((p) => p < 2)) throw new Error('--peers values must be at least 2')
  const sizes = list(o.elements).map(parseElements)
  const settings = {
    rounds: positiveInt(o.rounds, '--rounds'),
    warmup: positiveInt(o.warmup, '--warmup'),
    partBytes: positiveInt(o.partBytes, '--part-bytes'),
    compression: o.compression,
    timeoutS: positiveInt(o.timeout, '--timeout'),
    logDir: resolve(ROOT, o.logs)
  }
  if (settings.rounds < 1) throw new Error('--rounds must be at least 1')
  mkdirSync(settings.logDir, { recursive: true })

  const runs: RunOutcome[] = []
  for (const peers of peerCounts) {
    for (const elements of sizes) {
      const groupSize = o.groupSize != null ? positiveInt(o.groupSize, '--group-size') : peers
      if (groupSize < 2 || groupSize > peers || peers % groupSize !== 0) throw new Error(`--group-size must divide the peer count ${peers} and be at least 2, got ${groupSize}`)
      for (const spec of specs) runs.push(await runOne(spec, peers, groupSize, elements, settings))
    }
  }

  const command = `npm run bench:allreduce -- ${process.argv.slice(2).join(' ')}`.trim()
  const ratios = ratioTable(runs)
  const report = [
    `All-reduce on loopback, ${settings.rounds} measured rounds after ${settings.warmup} warm-up, medians; part ${settings.partBytes} B, compression ${settings.compression}.`,
    `Machine: ${machineLine()}.`,
    '',
    resultsTable(runs),
    '',
    ...(ratios != null ? ['Ratios of all-reduce time, ours ÷ other (below 1: ours faster; a time ratio r is a bus-bandwidth ratio 1/r):', '', ratios, ''] : []),
    ...notesOf(runs),
    '',
    `Reproduce: \`${command}\``
  ].join('\n')
  process.stdout.write(report + '\n')
  if (o.out != null) {
    const path = resolve(process.cwd(), o.out)
    mkdirSync(dirname(path), { recursive: true })
    writeFileSync(path, `# All-reduce benchmark (${new Date().toISOString().slice(0, 16)}Z)\n\n${report}\n`)
    progress(`report written to ${path}`)
  }
}

// Exit once the report is out: a failed peer's helpers (hivemind's p2pd daemons) can keep its output
// pipes, and so this process, alive long after the run ended.
main().then(() => process.exit(0), (err: Error) => {
  process.stderr.write(`bench:allreduce: ${err.message}\n`)
  process.exit(1)
})
