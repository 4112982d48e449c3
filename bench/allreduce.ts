/**
 * The all-reduce benchmark runner (npm run bench:allreduce -- --help). For every implementation,
 * peer count and tensor size it starts a coordinator on 127.0.0.1 and N peer processes, collects
 * their reports and prints one markdown table with ratios of ours against the others measured in
 * the same run. Protocol and column definitions: bench/README.md.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { cpus, totalmem, platform, release } from 'node:os'
import { dirname, resolve } from 'node:path'
import { Command } from 'commander'
import { IMPLS, implNamed } from './lib/impls.js'
import { ROOT, progress, runImpl } from './lib/run-impl.js'
import { notesOf, parseElements, ratioTable, resultsTable, type RunOutcome } from './lib/report.js'

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

const list = (text: string): string[] => text.split(',').map((s) => s.trim()).filter((s) => s !== '')

function positiveInt (text: string, what: string): number {
  const value = Number(text)
  if (!Number.isSafeInteger(value) || value < 0) throw new Error(`${what} must be a non-negative integer, got "${text}"`)
  return value
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
      for (const spec of specs) runs.push(await runImpl(spec, peers, groupSize, elements, settings))
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
