/**
 * The trainer's step against the agent's own round (npm run bench:trainer -- --help).
 * Every row is a run of the runner protocol (bench/lib/run-impl.ts): N peers, each a Python trainer
 * (bench/peers/trainer_peer.py) with its own agent process, stepping through the sidecar API on one
 * path (shared memory, a torch parameter copied through it, binary bodies, base64 JSON as before),
 * and hivemind's in-process DecentralizedAverager on torch tensors of the same size, all in one run.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { cpus, totalmem } from 'node:os'
import { dirname, resolve } from 'node:path'
import { Command } from 'commander'
import { implNamed } from './lib/impls.js'
import { ROOT, progress, runImpl } from './lib/run-impl.js'
import { formatElements, median, notesOf, parseElements, statsOf, type RunOutcome } from './lib/report.js'

const MiB = 2 ** 20
const list = (text: string): string[] => text.split(',').map(s => s.trim()).filter(s => s !== '')

/** Per round, the slowest peer's value of one of the `extra` series; then the median over rounds. */
function slowestMedian (run: RunOutcome, key: string): number | null {
  const series = run.results.map(r => r.extra?.[key]).filter((s): s is number[] => Array.isArray(s))
  if (series.length !== run.results.length || series.length === 0) return null
  const rounds = Math.min(...series.map(s => s.length))
  return median(Array.from({ length: rounds }, (_, k) => Math.max(...series.map(s => s[k]))))
}

function largest (run: RunOutcome, key: string): number | null {
  const values = run.results.map(r => r.extra?.[key]).filter((v): v is number => typeof v === 'number')
  return values.length > 0 ? Math.max(...values) : null
}

const fmt = (v: number | null, digits = 0): string => v == null || Number.isNaN(v) ? '–' : v.toFixed(digits)

/** Pure: the runs in, the markdown table out. */
export function trainerTable (runs: readonly RunOutcome[]): string {
  const lines = [
    '| peers × elements | path | step ms | agent round ms | **step ÷ round** | agent copy ms | matchmaking ms (of the round) | MiB copied by the agent per step | agent peak RSS MiB | trainer peak RSS MiB | hivemind step ms | step ÷ hivemind | max abs error | status |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|'
  ]
  for (const run of runs) {
    if (run.impl === 'hivemind') continue
    const s = statsOf(run)
    const hive = runs.find(r => r.impl === 'hivemind' && r.peers === run.peers && r.elements === run.elements)
    const h = hive != null ? statsOf(hive) : null
    const hiveCell = h != null ? fmt(h.roundMs) : hive != null ? `${hive.status}` : '–'
    const label = `${run.peers} × ${formatElements(run.elements)}`
    const path = run.impl.replace(/^trainer-/, '')
    if (s == null) {
      lines.push(`| ${label} | ${path} | – | – | – | – | – | – | – | – | ${hiveCell} | – | – | ${`${run.status}: ${run.message ?? ''}`.replace(/\|/g, '/')} |`)
      continue
    }
    const round = slowestMedian(run, 'agentRoundMs')
    const copied = slowestMedian(run, 'agentBytesCopied')
    const agentRss = largest(run, 'agentPeakRssBytes')
    const trainerRss = largest(run, 'trainerPeakRssBytes')
    lines.push(`| ${label} | ${path} | ${fmt(s.roundMs)} | ${fmt(round)} | ${round != null ? `**${(s.roundMs / round).toFixed(2)}**` : '–'} | ${fmt(slowestMedian(run, 'agentCopyMs'))} | ${fmt(slowestMedian(run, 'agentMatchmakingMs'))} | ${copied != null ? fmt(copied / MiB) : '–'} | ${agentRss != null ? fmt(agentRss / MiB) : '–'} | ${trainerRss != null ? fmt(trainerRss / MiB) : '–'} | ${hiveCell} | ${h != null ? `${(s.roundMs / h.roundMs).toFixed(2)}×` : '–'} | ${s.maxAbsError == null ? 'n/a' : s.maxAbsError === 0 ? '0' : s.maxAbsError.toExponential(1)} | ok |`)
  }
  return lines.join('\n')
}

async function main (): Promise<void> {
  const program = new Command()
    .name('bench:trainer')
    .description("A PyTorch trainer's averaging step through the sidecar API against its agent's own round, and hivemind's step, on loopback.")
    .option('--paths <list>', 'trainer paths: shm, torch, cuda (a torch parameter on the GPU), binary, base64 (base64 is the API before binary bodies)', 'shm,torch,binary,base64')
    .option('--peers <list>', 'peer counts', '2,4')
    .option('--elements <list>', 'float32 elements per peer (25M, 250M, 1000M)', '25M,250M')
    .option('--hivemind', 'also run hivemind 1.1.12 at each size (needs npm run bench:setup)', false)
    .option('--rounds <n>', 'measured rounds (median reported)', '5')
    .option('--warmup <n>', 'warm-up rounds', '1')
    .option('--timeout <s>', 'seconds one run may take', '900')
    .option('--out <file>', 'also write the report to this markdown file')
    .option('--logs <dir>', 'peer output', 'bench/results/logs')
  program.parse()
  const o = program.opts<{ paths: string, peers: string, elements: string, hivemind: boolean, rounds: string, warmup: string, timeout: string, out?: string, logs: string }>()
  const specs = list(o.paths).map(p => implNamed(`trainer-${p}`))
  if (o.hivemind) specs.push(implNamed('hivemind'))
  const settings = { rounds: Number(o.rounds), warmup: Number(o.warmup), partBytes: 65536, compression: 'none', timeoutS: Number(o.timeout), logDir: resolve(ROOT, o.logs) }
  mkdirSync(settings.logDir, { recursive: true })
  const runs: RunOutcome[] = []
  for (const peers of list(o.peers).map(Number)) {
    for (const elements of list(o.elements).map(parseElements)) {
      for (const spec of specs) runs.push(await runImpl(spec, peers, peers, elements, settings))
    }
  }
  const report = [
    `A trainer's step through the sidecar API against its agent's round (matchmaking + all-reduce, from the step's reply), one group of all peers, ${settings.rounds} measured rounds after ${settings.warmup} warm-up, medians of the slowest peer.`,
    `Machine: ${cpus().length} × ${cpus()[0]?.model ?? '?'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB.`,
    '',
    trainerTable(runs),
    '',
    ...notesOf(runs),
    '',
    `Reproduce: \`npm run bench:trainer -- ${process.argv.slice(2).join(' ')}\``
  ].join('\n')
  process.stdout.write(report + '\n')
  if (o.out != null) {
    const path = resolve(process.cwd(), o.out)
    mkdirSync(dirname(path), { recursive: true })
    writeFileSync(path, `# Trainer step benchmark (${new Date().toISOString().slice(0, 16)}Z)\n\n${report}\n`)
    progress(`report written to ${path}`)
  }
}

if (process.argv[1]?.endsWith('trainer-step.js') === true) {
  main().then(() => process.exit(0), (err: Error) => {
    process.stderr.write(`bench:trainer: ${err.message}\n`)
    process.exit(1)
  })
}
