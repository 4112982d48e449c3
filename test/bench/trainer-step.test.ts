/**
 * Smoke test of bench:trainer (bench/trainer-step.ts), so the harness behind BENCHMARKS.md's trainer table
 * cannot rot: two Python trainers with their own agents step a small tensor through every path,
 * and every row must come back ok with the exact mean. No timing is asserted.
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { existsSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')

test('bench:trainer runs two trainers through the shm, torch, binary and base64 paths to the exact mean', { timeout: 240_000 }, async () => {
  if (!existsSync(join(ROOT, '.venv/bin/python'))) {
    assert.fail('.venv/bin/python is missing: create it as .ci/run does (a venv over /usr/bin/python3 with ./clients/python installed)')
  }
  const { stdout } = await promisify(execFile)(process.execPath, [
    'dist/bench/trainer-step.js', '--paths', 'shm,torch,binary,base64', '--peers', '2', '--elements', '100k', '--rounds', '2', '--logs', 'bench/results/logs/smoke'
  ], { cwd: ROOT, maxBuffer: 1 << 24 })
  const rows = stdout.split('\n').filter(line => line.startsWith('| 2 × 100k'))
  assert.equal(rows.length, 4, `expected one row per path:\n${stdout}`)
  for (const row of rows) {
    const cells = row.split('|').map(c => c.trim())
    assert.equal(cells.at(-2), 'ok', `a path failed:\n${row}`)
    assert.equal(cells.at(-3), '0', `the mean is not exact:\n${row}`)
    assert.match(cells[5], /^\*\*\d+\.\d\d\*\*$/, `no step ÷ round ratio:\n${row}`)
  }
})
