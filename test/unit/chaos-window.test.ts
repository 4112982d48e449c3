import { test } from 'node:test'
import assert from 'node:assert/strict'
import { throughputWindowEnd } from '../../tools/faults/chaos-run.js'

test('chaos throughput counts over the fault schedule: one gap past the last fault, or the run\'s end', () => {
  // Faults every 15 s from t = 15 s to 45 s; rounds went on to 120 s without faults.
  assert.equal(throughputWindowEnd([15_000, 30_000, 45_000], 15_000, 120_000), 60_000)
  // The run ended inside the last slot: its end.
  assert.equal(throughputWindowEnd([15_000, 30_000, 45_000], 15_000, 50_000), 50_000)
  // Unordered starts, and no faults (the baseline): the whole run.
  assert.equal(throughputWindowEnd([45_000, 15_000], 15_000, 120_000), 60_000)
  assert.equal(throughputWindowEnd([], 15_000, 120_000), 120_000)
})
