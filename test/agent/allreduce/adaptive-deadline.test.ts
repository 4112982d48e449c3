import { test } from 'node:test'
import assert from 'node:assert/strict'
import { adaptiveWait, mad, median, quorumReached, MAD_K } from '../../../agent/allreduce/adaptive-deadline.js'

test('median and MAD of odd and even lists', () => {
  assert.equal(median([5, 1, 3]), 3)
  assert.equal(median([4, 1, 3, 2]), 2.5)
  assert.ok(Number.isNaN(median([])))
  // |x - 3|: 2, 1, 0, 1, 97 -> median 1; the outlier moves neither.
  assert.equal(mad([1, 2, 3, 4, 100]), 1)
})

test('quorum: a strict majority of the senders still expected, never all of them, never in a group of two', () => {
  assert.equal(quorumReached(1, 2), false, 'two senders: cutting the other leaves nothing to average')
  assert.equal(quorumReached(2, 3), true)
  assert.equal(quorumReached(1, 3), false)
  assert.equal(quorumReached(2, 4), false, 'half is not a majority: a slow half is waited for')
  assert.equal(quorumReached(3, 4), true)
  assert.equal(quorumReached(4, 4), false, 'nobody left to cut off')
  assert.equal(quorumReached(8, 15), true)
  assert.equal(quorumReached(7, 15), false)
})

test('limit = median + max(k·1.4826·MAD, median, floor), capped by the fixed timeout', () => {
  // Spread-out waits: the MAD term rules. median 425, MAD 75 -> 425 + 4 * 1.4826 * 75.
  const spread = adaptiveWait([300, 400, 500, 350, 450, 800], 50, 60_000)!
  assert.equal(spread.medianMs, 425)
  assert.equal(spread.madMs, 75)
  assert.ok(Math.abs(spread.limitMs - (425 + MAD_K * 1.4826 * 75)) < 1e-9)
  // Loopback: a few ms apart, MAD ~ 0. The floor rules, so a sender 20 ms late is not cut.
  const loopback = adaptiveWait([3, 4, 4, 5], 1500, 60_000)!
  assert.equal(loopback.limitMs, 4 + 1500)
  assert.ok(loopback.limitMs > 25)
  // Slow but even waits: the median rules (twice the typical wait) when it beats floor and MAD.
  assert.equal(adaptiveWait([5000, 5000, 5000], 1000, 60_000)!.limitMs, 10_000)
  // Never past the fixed sender timeout.
  assert.equal(adaptiveWait([40_000, 41_000], 1000, 60_000)!.limitMs, 60_000)
  // A single delivered wait still gives a limit (group of three: ours and one other are the majority).
  assert.equal(adaptiveWait([200], 1000, 60_000)!.limitMs, 1200)
  assert.equal(adaptiveWait([], 1000, 60_000), undefined)
})

test('one outlier among the delivered waits does not stretch the limit as a mean and deviation would', () => {
  const waits = [100, 110, 120, 105, 115, 9000]
  const limit = adaptiveWait(waits, 0, 60_000)!.limitMs
  const mean = waits.reduce((a, b) => a + b, 0) / waits.length
  const sd = Math.sqrt(waits.reduce((a, b) => a + (b - mean) ** 2, 0) / waits.length)
  assert.ok(limit < 300, `limit ${limit} ms`)
  assert.ok(mean + 3 * sd > 9000, 'mean + 3σ would wait out the outlier and more')
})
