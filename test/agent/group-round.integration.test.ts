import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startSwarm, fill } from './swarm-fixture.js'
import { agreedRound } from '../../agent/averager.js'
import { AveragingError } from '../../agent/errors.js'

test('agreedRound: the round most members report, ties to the highest, so one forged round cannot move a group of three', () => {
  assert.equal(agreedRound([5, 5, 2]), 5, 'a member behind catches up')
  assert.equal(agreedRound([5, 5, 1e12]), 5, 'one forged round is outvoted')
  assert.equal(agreedRound([3, 7]), 7, 'two that disagree take the higher')
  assert.equal(agreedRound([0, 0, 4, 4]), 4)
  assert.equal(agreedRound([]), 0)
})

test('a group agrees on its round: every member learns the same groupRound, and a bad round is refused before the step', { timeout: 60_000 }, async () => {
  const swarm = await startSwarm(3, { tensors: p => [{ name: 'x', shape: [64], data: fill(64, p) }], config: () => ({ targetGroupSize: 3, minGroupSize: 3 }) })
  try {
    const rounds = [5, 5, 2]
    const results = await Promise.all(swarm.averagers.map(async (a, i) => await a.step({ timeout: 30, round: rounds[i] })))
    assert.deepEqual(results.map(r => r.groupRound), [5, 5, 5])
    for (const bad of [-1, 1.5, NaN, 2e15]) {
      await assert.rejects(swarm.averagers[0].step({ timeout: 1, round: bad }), (e: unknown) => e instanceof AveragingError && /round must be an integer/.test(e.message), String(bad))
    }
  } finally { await swarm.stop() }
})
