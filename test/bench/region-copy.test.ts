/**
 * Smoke test of bench/region-copy.ts (the region passes a step adds, BENCHMARKS.md), so the harness
 * does not rot: a small region, every pass timed, and the divergence it computes: the mean it writes
 * back is half of each float32 value, so ‖v − v/2‖ / ‖v‖ = 0.5 exactly in float32 (bfloat16 holds v
 * rounded to 8 bits of mantissa: within 1 %).
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'

for (const dtype of ['float32', 'bfloat16']) {
  test(`bench/region-copy.js times the check, copy-in and write-back of a ${dtype} region and computes its divergence`, { timeout: 60_000 }, async () => {
    const { stdout } = await promisify(execFile)(process.execPath, ['dist/bench/region-copy.js', '--mib', '8', '--reps', '2', '--dtype', dtype], { maxBuffer: 1 << 20 })
    const divergence = Number(/^region of 8 MiB \S+ \(\d+ values\), median of 2 repetitions, divergence (\S+)\n/.exec(stdout)?.[1])
    if (dtype === 'float32') assert.equal(divergence, 0.5, stdout)
    else assert.ok(Math.abs(divergence - 0.5) < 0.005, stdout)
    for (const pass of ['check', 'copyIn', 'write-back \\+ distance', 'write-back \\(every part landed\\)', 'sums at landing \\(in the round\\)', '\\*\\*all\\*\\*', '\\*\\*all, every part landed\\*\\*']) {
      assert.match(stdout, new RegExp(`\\n\\| ${pass} \\| \\d+\\.\\d \\| \\d+\\.\\d \\|`), `${pass}:\n${stdout}`)
    }
  })
}
