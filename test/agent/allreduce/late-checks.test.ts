import { test } from 'node:test'
import assert from 'node:assert/strict'
import { LateChecks } from '../../../agent/allreduce/late-checks.js'

const settled = async (): Promise<void> => { for (let i = 0; i < 5; i++) await Promise.resolve() }

test('without a liveness check a late member is cut off at its limit', () => {
  let now = 0
  const checks = new LateChecks(undefined, () => now, () => {})
  assert.equal(checks.judgedAt(1, 100, 2000), 2100)
  now = 2099
  assert.equal(checks.cutNow(1, 100, 2000), false)
  now = 2100
  assert.equal(checks.cutNow(1, 100, 2000), true)
})

test('the check starts probeMs before the limit; an answer grants a new limit from the answer, silence cuts at the limit', async () => {
  let now = 0
  const asked: Array<{ i: number, answer: (alive: boolean) => void }> = []
  let verdicts = 0
  const checks = new LateChecks({ probe: async (i) => await new Promise<boolean>(resolve => { asked.push({ i, answer: resolve }) }), probeMs: 500 }, () => now, () => { verdicts++ })
  assert.equal(checks.judgedAt(1, 100, 2000), 1600)
  now = 1599
  assert.equal(checks.cutNow(1, 100, 2000), false)
  assert.equal(asked.length, 0, 'not checked before limit - probeMs')
  now = 1600
  assert.equal(checks.cutNow(1, 100, 2000), false)
  assert.deepEqual(asked.map(a => a.i), [1])
  assert.equal(checks.judgedAt(1, 100, 2000), Infinity, 'judged when its check ends')
  now = 1700; asked[0].answer(true); await settled()
  assert.equal(verdicts, 1)
  now = 2100
  assert.equal(checks.cutNow(1, 100, 2000), false, 'alive at 1700: not cut off at 2100')
  assert.equal(checks.judgedAt(1, 100, 2000), 3200, 'its next check, 500 ms before 1700 + 2000')
  now = 3200
  assert.equal(checks.cutNow(1, 100, 2000), false)
  assert.equal(asked.length, 2)
  asked[1].answer(false); await settled()
  now = 3699
  assert.equal(checks.cutNow(1, 100, 2000), false, 'silent, but its limit is 3700')
  now = 3700
  assert.equal(checks.cutNow(1, 100, 2000), true)
})

test('a member that delivered while its check ran is judged afresh: the stale answer is dropped', async () => {
  let now = 0
  const asked: Array<(alive: boolean) => void> = []
  let verdicts = 0
  const checks = new LateChecks({ probe: async () => await new Promise<boolean>(resolve => { asked.push(resolve) }), probeMs: 500 }, () => now, () => { verdicts++ })
  now = 1600
  checks.cutNow(2, 100, 2000)
  checks.reset(2)
  asked[0](false); await settled()
  assert.equal(verdicts, 0, 'no verdict for a wait that ended')
  now = 2100
  assert.equal(checks.judgedAt(2, 1800, 2000), 3300, 'the new wait from 1800: checked at 3300')
  assert.equal(checks.cutNow(2, 1800, 2000), false)
})
