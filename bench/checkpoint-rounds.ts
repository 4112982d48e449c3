/**
 * Checkpoints and round time (not a test): two peers in one process average N float32 values
 * back to back, without checkpoints, then with the agent's Checkpointer writing every round into a tmpfs
 * folder, then into a disk folder, all in the same run; one table row per mode with the ratio of its
 * round time to the run without checkpoints. How a mode is measured: bench/lib/checkpoint-rounds.ts.
 *
 *   npm run bench:checkpoint -- --elements 25M,250M --rounds 6 --warmup 1
 */
import { cpus, loadavg, platform, release, tmpdir, totalmem } from 'node:os'
import { Command } from 'commander'
import { parseElements } from './lib/report.js'
import { median, runMode, startPair, tensorSizes, type Mode, type ModeResult } from './lib/checkpoint-rounds.js'

interface Options { elements: string, rounds: string, warmup: string, modes: string, shmDir: string, diskDir: string, keep?: boolean, verbose?: boolean }

const program = new Command()
  .name('bench:checkpoint')
  .description('Round time of two in-process peers without checkpoints and with the Checkpointer writing every round to tmpfs and to disk.')
  .option('--elements <list>', 'float32 values per peer, comma-separated (25M, 250M, 100k)', '25M,250M')
  .option('--rounds <n>', 'measured rounds per mode', '6')
  .option('--warmup <n>', 'rounds before them, not measured', '1')
  .option('--modes <list>', 'none (no checkpoints), shm, disk', 'none,shm,disk')
  .option('--shm-dir <dir>', 'parent of the tmpfs checkpoint folder', '/dev/shm')
  .option('--disk-dir <dir>', 'parent of the disk checkpoint folder', tmpdir())
  .option('--keep', 'leave the checkpoint folders (their paths are printed)')
  .option('--verbose', 'print the Checkpointer\'s log lines on stderr')
program.parse()
const o = program.opts<Options>()
const count = (text: string, what: string, least: number): number => {
  const n = Number(text)
  if (!Number.isSafeInteger(n) || n < least) throw new Error(`${what} must be an integer ≥ ${least}, got "${text}"`)
  return n
}
const rounds = count(o.rounds, '--rounds', 1)
const warmup = count(o.warmup, '--warmup', 0)
const sizes = o.elements.split(',').map(parseElements)
const modes = o.modes.split(',').map(m => {
  if (m !== 'none' && m !== 'shm' && m !== 'disk') throw new Error(`--modes: unknown mode "${m}" (none, shm, disk)`)
  return m as Mode
})
const progress = (line: string): void => { process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${line}\n`) }

const f = (x: number, digits: number): string => Number.isFinite(x) ? x.toFixed(digits) : '–'
const label = (n: number): string => n >= 1e6 ? `${n / 1e6}M` : n >= 1e3 ? `${n / 1e3}k` : String(n)
const rows: string[] = []
const load = [loadavg()[0]]
const started = new Date()
for (const elements of sizes) {
  progress(`${label(elements)} values (${tensorSizes(elements).length} tensors): starting two peers`)
  const pair = await startPair(elements)
  try {
    let baseline: number | null = null
    for (const mode of modes) {
      progress(`${label(elements)} ${mode}: ${warmup} + ${rounds} rounds`)
      const r: ModeResult = await runMode(pair, {
        mode, rounds, warmup, parent: mode === 'shm' ? o.shmDir : mode === 'disk' ? o.diskDir : undefined, keep: o.keep, log: o.verbose === true ? progress : undefined
      })
      progress(`${label(elements)} ${mode}: rounds ms ${r.roundMs.map(x => x.toFixed(0)).join(' ')}; writes s ${r.writeSeconds.map(x => x.toFixed(2)).join(' ')}; snapshots ms ${r.snapshotMs.map(x => x.toFixed(0)).join(' ')}`)
      if (r.folder !== null && o.keep === true) progress(`kept ${r.folder}`)
      const round = median(r.roundMs)
      if (mode === 'none' && baseline === null) baseline = round
      const ckpt = mode !== 'none'
      rows.push([
        label(elements), mode, r.folder === null ? '–' : mode === 'shm' ? o.shmDir : o.diskDir,
        f(round, 0), `${f(Math.min(...r.roundMs), 0)}–${f(Math.max(...r.roundMs), 0)}`,
        baseline === null ? '–' : `**${f(round / baseline, 2)}**`,
        ckpt ? f(median(r.writeSeconds), 2) : '–', ckpt ? f(median(r.snapshotMs), 0) : '–',
        ckpt ? `${r.written} / ${r.skipped} / ${r.failed}` : '–', ckpt ? String(r.lastWritten ?? '–') : '–',
        f(r.wallS, 1), f(r.cpuS, 1), f(r.cpuS / r.wallS, 2)
      ].join(' | '))
      load.push(loadavg()[0])
    }
  } finally {
    await pair.stop()
  }
}

const cpu = cpus()
console.log([
  `Two peers in one process (real libp2p nodes on loopback, a DecentralizedAverager each, groups of 2), ${rounds} measured rounds after ${warmup} warm-up per mode, back to back; Checkpointer every = 1, keep = 3.`,
  '',
  '| values | mode | folder | round ms (median) | min–max | **÷ none** | write s (median) | snapshot copy ms (median) | written / skipped / failed | last round written | wall s | CPU s | CPU ÷ wall |',
  '|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|',
  ...rows.map(r => `| ${r} |`),
  '',
  `Machine: ${cpu.length} × ${cpu[0]?.model ?? '?'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, ${platform()} ${release()}, Node ${process.version}; ` +
    `load average (1 min) ${load.map(l => l.toFixed(1)).join(' → ')} over ${started.toISOString().slice(11, 16)}–${new Date().toISOString().slice(11, 16)}Z.`,
  'written / skipped / failed: writes of measured rounds (a round whose predecessor is still being written is skipped by design); wall s: measured rounds plus the wait for the last write; CPU s: this process (both peers and the writer).',
  '',
  `Reproduce: \`npm run bench:checkpoint -- ${process.argv.slice(2).join(' ')}\``
].join('\n'))
// libp2p's timers can outlive the stopped nodes by a while: the report is out, so end here.
process.exit(0)
