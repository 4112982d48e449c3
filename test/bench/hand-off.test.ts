/**
 * Smoke test of bench:hand-off (bench/hand-off.ts), so the harness behind RELIABILITY.md's short-notice
 * table cannot rot: four in-process agents, the last leaving a third into its span, once by hand-off
 * and once killed. The hand-off row must show what the table claims of it: nothing kept local, the
 * rest of its span repaired by every member left, and the members left holding the same values. No
 * timing is asserted.
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { dirname, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')

test('bench:hand-off: the handed-off span is repaired by the three left, who agree; the killed run prints its row', { timeout: 120_000 }, async () => {
  const { stdout } = await promisify(execFile)(process.execPath, ['dist/bench/hand-off.js', '--elements', '1M', '--part-bytes', '16384', '--at', '0.3', '--runs', '1'], { cwd: ROOT, maxBuffer: 1 << 22 })
  const rowOf = (variant: string): string[] => {
    const row = stdout.split('\n').find(line => line.startsWith(`| ${variant} | 0.3 | 1 |`))
    assert.ok(row !== undefined, `no ${variant} row:\n${stdout}`)
    return row.split('|').map(c => c.trim())
  }
  const handOff = rowOf('hand-off')
  const [reduced, span] = handOff[4].split(' of ').map(Number)
  assert.ok(reduced > 0 && reduced < span, `left mid-span: ${handOff[4]}`)
  assert.deepEqual(handOff[5].split(', ').map(Number), [0, 0, 0], 'nothing kept local')
  assert.deepEqual(handOff[6].split(', ').map(Number), [span - reduced, span - reduced, span - reduced], 'the rest of its span repaired by each member left')
  assert.equal(Number(handOff[7]), 0, 'the members left agree on every element')
  const kill = rowOf('kill')
  assert.equal(kill[5].split(', ').length, 3)
})
