import { test, mock } from 'node:test'
import assert from 'node:assert/strict'
import { ReducerDeadlines, type ReducerCutOff } from '../../../agent/allreduce/reducer-deadlines.js'

/** A fake clock the deadlines read, moved with Node's mocked timers. */
function setup (spanParts: number[], me = 0): { deadlines: ReducerDeadlines, cutOffs: ReducerCutOff[], at: (ms: number) => void } {
  mock.timers.enable({ apis: ['setTimeout', 'setImmediate'] })
  let now = 0
  const cutOffs: ReducerCutOff[] = []
  const deadlines = new ReducerDeadlines({ spanParts, me, floorMs: 2000, capMs: 20_000, onCutOff: (c) => { cutOffs.push(c) } }, () => now)
  return { deadlines, cutOffs, at: (ms) => { mock.timers.tick(ms - now); now = ms; mock.timers.runAll() } }
}

test('a reducer that never answers is cut off at median + slack once a majority answered, not before', (t) => {
  t.after(() => { mock.timers.reset() })
  const { deadlines, cutOffs, at } = setup([2, 2, 2, 2])
  at(100); deadlines.delivered(0)
  at(110); deadlines.delivered(1)
  at(2000)
  assert.equal(cutOffs.length, 0, 'two of four answered: no majority, nobody is judged')
  at(2100); deadlines.delivered(2)
  // Waits 100, 110, 2100: median 110, slack max(4·1.48·MAD, median, floor 2000) = 2000 → limit 2110 from the round's start.
  at(2109)
  assert.equal(cutOffs.length, 0, 'not before the limit')
  at(2200)
  assert.equal(cutOffs.length, 1)
  assert.equal(cutOffs[0].reducer, 3)
  assert.equal(cutOffs[0].part, 0)
  assert.equal(Math.round(cutOffs[0].wait.limitMs), 2110)
  deadlines.stop()
})

test('later means are timed from the previous one, and a reducer already answered is never cut off', (t) => {
  t.after(() => { mock.timers.reset() })
  const { deadlines, cutOffs, at } = setup([2, 2, 2])
  at(50); deadlines.delivered(0); deadlines.delivered(1); deadlines.delivered(2)
  at(5000); deadlines.delivered(0)
  at(5100); deadlines.delivered(1)
  // Reducer 2's second mean is owed from 50 ms; the waits for it were 4950 and 5050: limit 5000 + 5000.
  at(10_000)
  assert.equal(cutOffs.length, 0, 'still within median + median of the second part')
  at(10_100)
  assert.deepEqual(cutOffs.map(c => [c.reducer, c.part]), [[2, 1]])
  deadlines.stop()
})

test('a group of two never cuts off its other reducer, and a reducer that failed is not waited for', (t) => {
  t.after(() => { mock.timers.reset() })
  const pair = setup([3, 3])
  pair.at(10); pair.deadlines.delivered(0)
  pair.at(60_000)
  assert.equal(pair.cutOffs.length, 0, 'one of two is no majority')
  pair.deadlines.stop()
  mock.timers.reset()
  const four = setup([1, 1, 1, 1], 1)
  four.at(10); four.deadlines.delivered(1)
  four.deadlines.failed(0)
  four.at(20); four.deadlines.delivered(2)
  // Expected now: reducers 1, 2, 3; two answered, a majority: reducer 3 is cut off, the failed one is not reported.
  four.at(10_000)
  assert.deepEqual(four.cutOffs.map(c => c.reducer), [3])
  four.deadlines.stop()
})

test('our own span is never cut off, and reducers without a span are never waited for', (t) => {
  t.after(() => { mock.timers.reset() })
  const { deadlines, cutOffs, at } = setup([4, 0, 4, 4, 0], 0)
  at(10); deadlines.delivered(2)
  at(20); deadlines.delivered(3)
  at(30_000)
  assert.deepEqual(cutOffs, [], 'the one owing is ourselves')
  deadlines.stop()
})

test('a reducer we cut off as a sender for silence is cut off as soon as a majority returned the mean it owes, with no second slack', (t) => {
  t.after(() => { mock.timers.reset() })
  const { deadlines, cutOffs, at } = setup([2, 2, 2, 2])
  // Reducer 3 sent us nothing: our sender deadline cut it off at 2010 ms; the others' first means
  // came just after (they too waited for its part before they could answer).
  at(2010); deadlines.silent(3)
  assert.equal(cutOffs.length, 0, 'nobody answered yet: no majority, nobody is judged')
  at(2020); deadlines.delivered(0)
  at(2030); deadlines.delivered(1)
  assert.equal(cutOffs.length, 0, 'two of four is no majority')
  at(2040); deadlines.delivered(2)
  // Without silent(): median 2030 + max(.., median 2030, floor 2000) = a limit of 4060 ms.
  at(2041)
  assert.deepEqual(cutOffs.map(c => [c.reducer, c.part, c.silentSender]), [[3, 0, true]])
  deadlines.stop()
})

test('beside one cut off at once for silence, a reducer that is only late still gets median + slack', (t) => {
  t.after(() => { mock.timers.reset() })
  const { deadlines, cutOffs, at } = setup([1, 1, 1, 1, 1])
  at(2010); deadlines.silent(4)
  at(2020); deadlines.delivered(0)
  at(2030); deadlines.delivered(1)
  at(2040); deadlines.delivered(2)
  // Three of five answered: reducer 4 (silent) goes at once; reducer 3 at median 2030 + max(.., median, floor) = 4060 ms.
  at(2041)
  assert.deepEqual(cutOffs.map(c => [c.reducer, c.silentSender]), [[4, true]])
  at(4050)
  assert.equal(cutOffs.length, 1, 'reducer 3 is not cut off before its limit')
  at(4070)
  assert.deepEqual(cutOffs.map(c => [c.reducer, c.silentSender]), [[4, true], [3, false]])
  deadlines.stop()
})

test('a reducer that has not accepted our stream is cut off at median + slack of the others\' acceptance times, means or no means', (t) => {
  t.after(() => { mock.timers.reset() })
  // We reduce no span (as a restarted agent may not): a frozen member is never a sender we judge, and
  // the means of the others wait for its part, so only acceptance can tell it from a slow reducer.
  const { deadlines, cutOffs, at } = setup([2, 2, 2, 0], 3)
  at(10); deadlines.accepted(0)
  at(2000)
  assert.equal(cutOffs.length, 0, 'one of three accepted: no majority, nobody is judged')
  at(2012); deadlines.accepted(1)
  // Acceptance times 10 and 2012: median 1011, slack max(4·1.48·MAD 1001, median, floor 2000) = 5936 → limit 6947.
  at(6946)
  assert.equal(cutOffs.length, 0, 'not before the limit')
  at(6950)
  assert.equal(cutOffs.length, 1)
  assert.equal(cutOffs[0].reducer, 2)
  assert.equal(cutOffs[0].unaccepted, true)
  assert.equal(cutOffs[0].silentSender, false)
  assert.equal(Math.round(cutOffs[0].wait.limitMs), 6947)
  deadlines.stop()
})

test('acceptance: our own span counts as accepted at once, and a reducer that accepts before the limit is not cut off for it', (t) => {
  t.after(() => { mock.timers.reset() })
  const { deadlines, cutOffs, at } = setup([2, 2, 2, 2], 0)
  at(5); deadlines.accepted(1)
  at(8); deadlines.accepted(2)
  // Ours at 0, 5, 8: median 5, slack the floor → limit 2005 from the round's start.
  at(1500); deadlines.accepted(3)
  at(5000)
  assert.deepEqual(cutOffs, [], 'reducer 3 accepted in time; means are judged apart')
  deadlines.stop()
})

test('acceptance: with ours at 0 and two others at 5 and 8 ms, the fourth is cut off at 2005 ms', (t) => {
  t.after(() => { mock.timers.reset() })
  const { deadlines, cutOffs, at } = setup([2, 2, 2, 2], 0)
  at(5); deadlines.accepted(1)
  at(8); deadlines.accepted(2)
  at(2004)
  assert.equal(cutOffs.length, 0)
  at(2010)
  assert.deepEqual(cutOffs.map(c => [c.reducer, c.unaccepted]), [[3, true]])
  deadlines.stop()
})

/** Deadlines with a liveness check whose answers the test gives, one promise per check. */
function setupProbed (spanParts: number[], me = 0): { deadlines: ReducerDeadlines, cutOffs: ReducerCutOff[], at: (ms: number) => void, checks: Array<{ r: number, startedAt: number, answer: (alive: boolean) => void }> } {
  mock.timers.enable({ apis: ['setTimeout', 'setImmediate'] })
  let now = 0
  const cutOffs: ReducerCutOff[] = []
  const checks: Array<{ r: number, startedAt: number, answer: (alive: boolean) => void }> = []
  const deadlines = new ReducerDeadlines({
    spanParts,
    me,
    floorMs: 2000,
    capMs: 20_000,
    onCutOff: (c) => { cutOffs.push(c) },
    checks: { probe: async (r) => await new Promise<boolean>(resolve => { checks.push({ r, startedAt: now, answer: resolve }) }), probeMs: 1000 }
  }, () => now)
  return { deadlines, cutOffs, checks, at: (ms) => { mock.timers.tick(ms - now); now = ms; mock.timers.runAll() } }
}

const settled = async (): Promise<void> => { for (let i = 0; i < 5; i++) await Promise.resolve() }

test('a late reducer that answers its liveness check is waited for; checked again before its new limit, a silent one is cut off', async (t) => {
  t.after(() => { mock.timers.reset() })
  const { deadlines, cutOffs, checks, at } = setupProbed([2, 2, 2, 2])
  at(100); deadlines.delivered(0)
  at(110); deadlines.delivered(1)
  at(2100); deadlines.delivered(2)
  // Limit 2110 (as above); the check is due 1000 ms before it, which has passed: it starts now.
  at(2101)
  assert.deepEqual(checks.map(c => [c.r, c.startedAt]), [[3, 2100]])
  at(2105); checks[0].answer(true); await settled()
  at(3214)
  assert.equal(cutOffs.length, 0, 'alive at 2105: its limit runs from then (4215)')
  assert.equal(checks.length, 1, 'its next check is due 1000 ms before that limit')
  at(3215)
  assert.deepEqual(checks.map(c => [c.r, c.startedAt]), [[3, 2100], [3, 3215]])
  at(4000); checks[1].answer(false); await settled()
  assert.deepEqual(cutOffs.map(c => [c.reducer, c.part, c.checkUnanswered]), [[3, 0, true]], 'silent through its check: cut off as the check ends')
  deadlines.stop()
})

test('a late reducer is first checked once late by the statistics, and cut off as soon as it is silent through the check; one that delivers meanwhile is not', async (t) => {
  t.after(() => { mock.timers.reset() })
  // Means of part 0 from reducers 0 and 1 at 100 and 110 ms, from 2 at 130: median 110, MAD 10, so
  // late by the statistics at 110 + max(4 · 1.48 · 10, 110) = 220 ms; limit 110 + floor 2000 = 2110.
  const silent = setupProbed([2, 2, 2, 2])
  silent.at(100); silent.deadlines.delivered(0)
  silent.at(110); silent.deadlines.delivered(1)
  silent.at(130); silent.deadlines.delivered(2)
  silent.at(219)
  assert.equal(silent.checks.length, 0, 'not late by the statistics yet')
  silent.at(221)
  assert.deepEqual(silent.checks.map(c => c.r), [3], 'checked once late by the statistics, long before the floor')
  silent.at(1220); silent.checks[0].answer(false); await settled()
  assert.deepEqual(silent.cutOffs.map(c => [c.reducer, c.checkUnanswered]), [[3, true]], 'silent through a request timeout\'s check: cut off then, not at the limit (2110)')
  silent.deadlines.stop()
  mock.timers.reset()
  const late = setupProbed([2, 2, 2, 2])
  late.at(100); late.deadlines.delivered(0)
  late.at(110); late.deadlines.delivered(1)
  late.at(130); late.deadlines.delivered(2)
  late.at(221)
  late.at(500); late.deadlines.delivered(3)
  late.checks[0].answer(false); await settled()
  late.at(3000)
  assert.equal(late.cutOffs.length, 0, 'reducer 3 delivered while its check ran: the silent answer no longer counts')
  late.deadlines.stop()
  mock.timers.reset()
  const slow = setupProbed([2, 2, 2, 2])
  slow.at(100); slow.deadlines.delivered(0)
  slow.at(110); slow.deadlines.delivered(1)
  slow.at(130); slow.deadlines.delivered(2)
  slow.at(221); slow.checks[0].answer(true); await settled()
  slow.at(2109)
  assert.equal(slow.checks.length, 1, 'alive at 221: not checked again before the limit (2110)')
  slow.at(2111)
  assert.equal(slow.checks.length, 2, 'then checked again, its limit running from its answer (2221)')
  assert.equal(slow.cutOffs.length, 0)
  slow.deadlines.stop()
})

test('acceptance: a reducer late to accept our stream that answers its liveness check is waited for; a silent one is cut off as its check ends', async (t) => {
  t.after(() => { mock.timers.reset() })
  const alive = setupProbed([2, 2, 2, 2])
  alive.at(5); alive.deadlines.accepted(1)
  alive.at(8); alive.deadlines.accepted(2)
  // Ours at 0, 5, 8: limit 2005 from the round's start (as above); late by the statistics at
  // 5 + max(4 · 1.48 · 3, 5) = 22.8 ms, when it is first checked.
  alive.at(22)
  assert.equal(alive.checks.length, 0)
  alive.at(23)
  assert.deepEqual(alive.checks.map(c => [c.r, c.startedAt]), [[3, 23]])
  alive.at(1500); alive.checks[0].answer(true); await settled()
  alive.at(3000)
  assert.equal(alive.cutOffs.length, 0, 'alive at 1500: its limit runs from then (3500)')
  alive.at(3200); alive.deadlines.accepted(3)
  alive.at(10_000)
  assert.equal(alive.cutOffs.length, 0, 'it accepted: nobody is cut off')
  alive.deadlines.stop()
  mock.timers.reset()
  const frozen = setupProbed([2, 2, 2, 2])
  frozen.at(5); frozen.deadlines.accepted(1)
  frozen.at(8); frozen.deadlines.accepted(2)
  frozen.at(1022)
  assert.equal(frozen.cutOffs.length, 0, 'its check runs')
  frozen.at(1023); frozen.checks[0].answer(false); await settled()
  assert.deepEqual(frozen.cutOffs.map(c => [c.reducer, c.unaccepted, c.checkUnanswered]), [[3, true, true]], 'silent through its check: cut off at 1023 ms, not at the limit (2005)')
  frozen.deadlines.stop()
})

test('a reducer that as a sender was silent and did not answer a liveness check is cut off at once, majority or not; one only silent is not', (t) => {
  t.after(() => { mock.timers.reset() })
  // Two reducers, ours and its: one of two is never a majority.
  const pair = setup([2, 2])
  pair.at(10); pair.deadlines.delivered(0)
  pair.at(2010); pair.deadlines.silent(1)
  pair.at(30_000)
  assert.equal(pair.cutOffs.length, 0, 'silent without a check: the pair rule stands')
  pair.deadlines.silent(1, true)
  pair.at(30_001)
  assert.deepEqual(pair.cutOffs.map(c => [c.reducer, c.part, c.unanswered, c.unaccepted, c.samples]), [[1, 0, true, true, 0]])
  pair.at(60_000)
  assert.equal(pair.cutOffs.length, 1, 'cut off once')
  pair.deadlines.stop()
  mock.timers.reset()
  // It had accepted and sent one of its two means: the second is not waited for either.
  const four = setup([2, 2, 2, 2])
  four.at(5); four.deadlines.accepted(3)
  four.at(20); four.deadlines.delivered(3)
  four.at(2010); four.deadlines.silent(3, true)
  four.at(2011)
  assert.deepEqual(four.cutOffs.map(c => [c.reducer, c.part, c.unanswered, c.unaccepted]), [[3, 1, true, false]])
  four.deadlines.stop()
})

test('two reducers, one accepted: with liveness checks the other is checked once late and cut off only if it does not answer', async (t) => {
  t.after(() => { mock.timers.reset() })
  // We reduce no span (index 1); reducers 0 and 2. Reducer 0 accepts at 20 ms: limit 20 + max(20, floor 2000) = 2020;
  // late by the statistics at 20 + 20 = 40 ms, when the other is checked.
  const frozen = setupProbed([2, 0, 2, 0], 1)
  frozen.at(20); frozen.deadlines.accepted(0)
  frozen.at(39)
  assert.equal(frozen.checks.length, 0, 'no check before it is late')
  frozen.at(41)
  assert.deepEqual(frozen.checks.map(c => c.r), [2])
  frozen.at(1040)
  assert.equal(frozen.cutOffs.length, 0, 'not while its check runs')
  frozen.at(1041); frozen.checks[0].answer(false); await settled()
  assert.deepEqual(frozen.cutOffs.map(c => [c.reducer, c.unaccepted, c.unanswered, c.checkUnanswered]), [[2, true, false, true]])
  frozen.deadlines.stop()
  mock.timers.reset()
  const slow = setupProbed([2, 0, 2, 0], 1)
  slow.at(20); slow.deadlines.accepted(0)
  slow.at(1041); slow.checks[0].answer(true); await settled()
  slow.at(3000)
  assert.equal(slow.cutOffs.length, 0, 'alive: waited for')
  slow.deadlines.stop()
  mock.timers.reset()
  // Without checks the pair is never judged (no proof either way).
  const unchecked = setup([2, 0, 2, 0], 1)
  unchecked.at(20); unchecked.deadlines.accepted(0)
  unchecked.at(19_000)
  assert.equal(unchecked.cutOffs.length, 0)
  unchecked.deadlines.stop()
})
