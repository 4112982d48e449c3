import { test } from 'node:test'
import assert from 'node:assert/strict'
import { StallWatch, stalledWithin, STALL_MS } from '../../tools/faults/stall-watch.js'

test('StallWatch: a tick a second or more late is a stall, from the tick before it, as long as it was late', () => {
  let now = 1000
  const watch = new StallWatch(() => now)
  watch.start()
  watch.stop()
  // Ticks every 100 ms, some late by tens of ms (a loaded machine), then one 15.6 s late (a paused VM).
  for (const t of [1100, 1230, 1330, 1430 + 15_600, 1530 + 15_600, 1530 + 15_600 + 100 + STALL_MS - 1]) { now = t; watch.observe(t) }
  assert.deepEqual(watch.stalls, [{ at: 1330, ms: 15_600 }], 'the 130-ms tick and the one just under a second late are no stalls')
})

test('stalledWithin: the part of each stall inside the window', () => {
  const stalls = [{ at: 1000, ms: 2000 }, { at: 10_000, ms: 500 }, { at: 20_000, ms: 1000 }]
  assert.equal(stalledWithin(stalls, 0, 30_000), 3500)
  assert.equal(stalledWithin(stalls, 2000, 10_250), 1000 + 250, 'the first stall\'s last second, the second stall\'s first 250 ms')
  assert.equal(stalledWithin(stalls, 12_000, 19_000), 0)
  assert.equal(stalledWithin([], 0, 1000), 0)
})
