/**
 * Smoke test of bench:checkpoint (bench/checkpoint-rounds.ts), so the harness behind BENCHMARKS.md's checkpoint row
 * cannot rot: two in-process peers average 100k values with the Checkpointer writing every round,
 * and the newest checkpoint it leaves must load with exactly the values of the last round written.
 * No timing is asserted.
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { loadNewestCheckpoint } from '../../agent/checkpoint/index.js'
import { SWARM, averagedValue, tensorSizes } from '../../bench/lib/checkpoint-rounds.js'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')

test('bench:checkpoint averages 100k values with a checkpoint each round, and the newest loads with the last written round\'s mean', { timeout: 120_000 }, async () => {
  const parent = await mkdtemp(join(tmpdir(), 'avs-bench-ckpt-'))
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [
      'dist/bench/checkpoint-rounds.js', '--elements', '100k', '--rounds', '2', '--warmup', '1', '--modes', 'disk', '--disk-dir', parent, '--keep'
    ], { cwd: ROOT, maxBuffer: 1 << 24 })
    const row = stdout.split('\n').find(line => line.startsWith('| 100k | disk |'))
    assert.ok(row !== undefined, `no row for the disk mode:\n${stdout}`)
    const cells = row.split('|').map(c => c.trim())
    const [written, skipped, failed] = cells[9].split('/').map(c => Number(c.trim()))
    assert.equal(failed, 0, `a write failed:\n${row}`)
    assert.ok(written >= 1, `no measured round was written:\n${row}`)
    assert.equal(written + skipped, 2, `every measured round is either written or skipped:\n${row}`)
    const lastWritten = Number(cells[10])
    const folders = await readdir(parent)
    assert.equal(folders.length, 1, `one kept checkpoint folder expected, found ${folders.join(', ')}`)
    const { checkpoint, skipped: unreadable } = await loadNewestCheckpoint(join(parent, folders[0]), SWARM, undefined, { log: () => {} })
    assert.deepEqual(unreadable, [])
    assert.ok(checkpoint !== null, 'the checkpoint folder holds no loadable checkpoint')
    assert.equal(checkpoint.manifest.round, lastWritten, 'the newest checkpoint is not the last round the harness wrote')
    const sizes = tensorSizes(100_000)
    assert.equal(checkpoint.tensors.size, sizes.length)
    sizes.forEach((n, t) => {
      const values = checkpoint.tensors.get(`layer.${t}`)
      assert.ok(values !== undefined && values.length === n, `tensor layer.${t} is missing or has the wrong length`)
      for (let j = 0; j < n; j++) {
        if (values[j] !== averagedValue(t, j, lastWritten)) assert.fail(`layer.${t}[${j}] = ${values[j]}, the mean of round ${lastWritten} is ${averagedValue(t, j, lastWritten)}`)
      }
    })
  } finally {
    await rm(parent, { recursive: true, force: true })
  }
})
