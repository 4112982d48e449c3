/**
 * Smoke test of bench:state-download (bench/state-download.ts), so the harness behind BENCHMARKS.md's
 * state-download table cannot rot: an 8 MiB state from a donor process, once over its direct data
 * channel and once over a libp2p stream. The bench itself fails when a value differs from the one
 * sent or the state came over another path than the row names. No timing is asserted.
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { dirname, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')

test('bench:state-download: a donor process serves 8 MiB over the direct data channel and over libp2p, every value checked', { timeout: 120_000 }, async () => {
  const { stdout } = await promisify(execFile)(process.execPath, ['dist/bench/state-download.js', '--mib', '8', '--paths', 'direct,libp2p'], { cwd: ROOT, maxBuffer: 1 << 22 })
  for (const path of ['direct', 'libp2p']) {
    const row = stdout.split('\n').find(line => line.startsWith(`| loopback | 8.00 MiB | ${path} |`))
    assert.ok(row !== undefined, `no ${path} row:\n${stdout}`)
    const [seconds, rate, newcomerCpu, donorCpu] = row.split('|').slice(4, 8).map(c => Number(c.trim()))
    assert.ok(seconds > 0 && rate > 0 && newcomerCpu > 0 && donorCpu > 0, row)
  }
})

test('bench:state-download: --help prints the options; an unknown option is one sentence and the usage, exit 2, no stack', async () => {
  const run = promisify(execFile)
  const { stdout } = await run(process.execPath, ['dist/bench/state-download.js', '--help'], { cwd: ROOT })
  for (const option of ['--mib', '--paths', '--repeats', '--mbit', '--into']) assert.ok(stdout.includes(option), `--help names ${option}:\n${stdout}`)
  const failed = await run(process.execPath, ['dist/bench/state-download.js', '--mbits', '100'], { cwd: ROOT }).then(() => undefined, (err: { code: number, stderr: string }) => err)
  assert.ok(failed !== undefined, 'a misspelt option runs nothing')
  assert.equal(failed.code, 2)
  assert.match(failed.stderr.split('\n')[0], /^bench:state-download: Unknown option '--mbits'/)
  assert.ok(!failed.stderr.includes('    at '), `no stack:\n${failed.stderr}`)
})
