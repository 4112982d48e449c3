import { mkdirSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, join } from 'node:path'
import { linesLog, type Log } from '../../agent/log.js'

/**
 * What agents in a test say, kept so that a failure seen once can be read. A multi-peer test that
 * fails one run in twenty (in CI, or under CPU burners) used to leave only its assertion: the
 * agents' warnings and debug lines went nowhere unless AVS_TEST_LOG was set, so the cause had to
 * be caught again with logging on (an 8-peer all-reduce that left one member with five failed
 * reducers under load, a ghost member at 256 peers).
 *
 * With AVS_TEST_LOG set every line goes to stderr as it comes. Otherwise each label (a peer) keeps
 * at least its last LINES_PER_LABEL lines in memory, and when the test file's process exits with a failure
 * they are written, oldest first, to $TMPDIR/avs-test-logs/<file>-<pid>.log, whose path goes to
 * stderr. Lines carry ms since the process started, so the peers' stories interleave by time.
 */
const LINES_PER_LABEL = 2000

/** Per label, its lines with their order in the process (seq), oldest first. */
const kept = new Map<string, Array<{ seq: number, line: string }>>()
let seq = 0
let exitHookInstalled = false

/** A log for one peer (or harness part) of a test: `[label]` starts each of its lines. */
export function testLog (label: string, linesPerLabel = LINES_PER_LABEL): Log {
  if (process.env.AVS_TEST_LOG != null) return linesLog((line) => { console.error(`[${label}] ${line}`) })
  installExitHook()
  let lines = kept.get(label)
  if (lines == null) { lines = []; kept.set(label, lines) }
  const ring = lines
  return linesLog((line) => {
    ring.push({ seq: seq++, line: `${performance.now().toFixed(0).padStart(7)} [${label}] ${line}` })
    // Trimmed in halves, not a line at a time: at most twice the lines, the last ones written.
    if (ring.length >= 2 * linesPerLabel) ring.splice(0, linesPerLabel)
  })
}

/** The lines `label` kept (oldest first, at most twice its lines per label): for a report that quotes them. */
export function keptLines (label: string): string[] {
  return (kept.get(label) ?? []).map(e => e.line)
}

/** Writes what the labels kept to a file and says where (the test file failed). */
export function writeKeptLines (file = keptLinesFile()): string | undefined {
  const all = [...kept.values()].flat().sort((a, b) => a.seq - b.seq)
  if (all.length === 0) return undefined
  mkdirSync(join(tmpdir(), 'avs-test-logs'), { recursive: true })
  writeFileSync(file, all.map(e => e.line).join('\n') + '\n')
  return file
}

function keptLinesFile (): string {
  return join(tmpdir(), 'avs-test-logs', `${basename(process.argv[1] ?? 'test', '.js')}-${process.pid}.log`)
}

function installExitHook (): void {
  if (exitHookInstalled) return
  exitHookInstalled = true
  process.on('exit', (code) => {
    // node:test sets a failing file's exit code; a passing file's lines are dropped with it.
    if (code === 0 && (process.exitCode ?? 0) === 0) return
    try {
      const file = writeKeptLines()
      if (file != null) process.stderr.write(`the agents' last log lines of this failed test file: ${file}\n`)
    } catch (err) {
      process.stderr.write(`could not write the agents' log lines: ${String(err)}\n`)
    }
  })
}
