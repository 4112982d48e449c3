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
  assert.equal(checks.cutNow(1, 100, 2000), 'limit')
})

test('the check starts probeMs before the limit; an answer grants a new limit from the answer, silence cuts as the check ends', async () => {
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
  now = 3600; asked[1].answer(false); await settled()
  assert.equal(checks.judgedAt(1, 100, 2000), 3600, 'silent: judged at once')
  assert.equal(checks.cutNow(1, 100, 2000), 'unanswered', 'cut off as its check ends, before its limit (3700)')
})

test('a member late by the statistics is checked then, once a round: silent, it is cut off a check later, not at the limit', async () => {
  let now = 0
  const asked: Array<{ i: number, answer: (alive: boolean | 'unknown') => void }> = []
  const checks = new LateChecks({ probe: async (i) => await new Promise<boolean | 'unknown'>(resolve => { asked.push({ i, answer: resolve }) }), probeMs: 500 }, () => now, () => {})
  // Waiting since 100 under a limit of 2000 ms; late by the statistics 60 ms into its wait.
  assert.equal(checks.judgedAt(1, 100, 2000, 60), 160)
  now = 159
  assert.equal(checks.cutNow(1, 100, 2000, 60), false)
  assert.equal(asked.length, 0)
  now = 160
  assert.equal(checks.cutNow(1, 100, 2000, 60), false)
  assert.equal(asked.length, 1, 'checked 60 ms into its wait, not 1500')
  now = 660; asked[0].answer(false); await settled()
  assert.equal(checks.cutNow(1, 100, 2000, 60), 'unanswered', 'silent: cut off at 660, not at 2100')
  // A member that answers is not checked early again this round, whatever part it is late with.
  checks.reset(2)
  assert.equal(checks.judgedAt(2, 700, 2000, 60), 760)
  now = 760; checks.cutNow(2, 700, 2000, 60)
  now = 770; asked[1].answer(true); await settled()
  checks.reset(2)
  assert.equal(checks.judgedAt(2, 800, 2000, 60), 2300, 'its next part\'s wait: checked probeMs before the limit only')
  // No verdict (a client-mode agent serves no check): proof of nothing, cut off at the limit as without checks.
  checks.reset(4)
  now = 3000; checks.cutNow(4, 2940, 2000, 60)
  now = 3010; asked[2].answer('unknown'); await settled()
  assert.equal(checks.cutNow(4, 2940, 2000, 60), false, 'no verdict: not cut off before its limit')
  assert.equal(checks.judgedAt(4, 2940, 2000, 60), 4940)
  now = 4940
  assert.equal(checks.cutNow(4, 2940, 2000, 60), 'limit')
  // Without checks the statistics change nothing: cut off at the limit.
  const unchecked = new LateChecks(undefined, () => now, () => {})
  assert.equal(unchecked.judgedAt(3, 100, 2000, 60), 2100)
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
