import { test } from 'node:test'
import assert from 'node:assert/strict'
import { MAX_STRETCH, awakeTimeout, lateTolerance, nextWait } from '../../../agent/util/awake-timeout.js'

test('nextWait: on time aborts; late waits again as long as it was late, within MAX_STRETCH times the timeout', () => {
  assert.equal(lateTolerance(300), 30)
  assert.equal(lateTolerance(100), 25)
  // Set at 0 for 300 ms: fired at 320 (20 ms late, tolerated) aborts.
  assert.equal(nextWait(300, 0, 0, 300, 320), 0)
  // Fired at 600: 300 ms late, wait 300 more.
  assert.equal(nextWait(300, 0, 0, 300, 600), 300)
  // The second timer (set at 600 for 300) on time: abort.
  assert.equal(nextWait(300, 0, 600, 300, 910), 0)
  // Very late: the stretch ends at MAX_STRETCH × 300 ms from the start.
  assert.equal(nextWait(300, 0, 0, 300, 1100), MAX_STRETCH * 300 - 1100)
  assert.equal(nextWait(300, 0, 0, 300, MAX_STRETCH * 300 + 1), 0)
})

test('awakeTimeout aborts after its time when the loop runs on time, later after a stall', async (t) => {
  // Its timers do not hold the process open (as AbortSignal.timeout's): this one does, for the test.
  const keepAlive = setInterval(() => {}, 1000)
  t.after(() => { clearInterval(keepAlive) })
  let t0 = performance.now()
  const quick = awakeTimeout(50)
  await new Promise(resolve => quick.signal.addEventListener('abort', resolve))
  const onTime = performance.now() - t0
  assert.ok(onTime >= 45 && onTime < 200, `aborted after ${onTime.toFixed(0)} ms`)
  t0 = performance.now()
  const stalled = awakeTimeout(50)
  const until = performance.now() + 120
  while (performance.now() < until) { /* a stall of ours */ }
  await new Promise(resolve => stalled.signal.addEventListener('abort', resolve))
  const after = performance.now() - t0
  // Fired ~70 ms late at ~120 ms: waits ~70 ms more (within 4 × 50 ms of its start).
  assert.ok(after >= 180, `aborted ${after.toFixed(0)} ms after a 120 ms stall: it waited again for as long as it was late`)
  const cleared = awakeTimeout(20)
  cleared.clear()
  await new Promise(resolve => setTimeout(resolve, 60))
  assert.equal(cleared.signal.aborted, false)
})
