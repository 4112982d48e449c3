import { test } from 'node:test'
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'
import { WorkQueue, runWorkers } from '../../../operator/queue/work-queue.js'
import { ExponentialBackoff } from '../../../operator/queue/backoff.js'

test('a key added many times waits in the queue once', async () => {
  const q = new WorkQueue()
  q.add('a'); q.add('b'); q.add('a'); q.add('a')
  assert.equal(q.length, 2)
  assert.equal(await q.get(), 'a')
  assert.equal(await q.get(), 'b')
})

test('a key added while it is processed is not handed out twice, and comes back after done()', async () => {
  const q = new WorkQueue()
  q.add('a')
  const k = await q.get()
  q.add('a')
  assert.equal(q.length, 0, 'held back while processing')
  q.done(k!)
  assert.equal(q.length, 1)
  assert.equal(await q.get(), 'a')
})

test('back-off doubles per failure, is capped, and forget() resets it', () => {
  const b = new ExponentialBackoff(5, 100)
  assert.deepEqual([b.next('k'), b.next('k'), b.next('k'), b.next('k'), b.next('k'), b.next('k')], [5, 10, 20, 40, 80, 100])
  assert.equal(b.retries('k'), 6)
  b.forget('k')
  assert.equal(b.next('k'), 5)
  assert.equal(b.next('other'), 5)
})

test('workers never run one key concurrently, retry failures with back-off and stop on shutdown', async () => {
  const q = new WorkQueue(new ExponentialBackoff(5, 50))
  let running = 0
  let maxConcurrentSameKey = 0
  const calls: string[] = []
  let failuresLeft = 2
  const workers = runWorkers(q, 4, async (key) => {
    running++
    maxConcurrentSameKey = Math.max(maxConcurrentSameKey, running)
    calls.push(key)
    if (key === 'a') q.add('a') // re-added while running: must wait for this run to finish
    await sleep(5)
    running--
    if (key === 'a' && failuresLeft-- > 0) throw new Error('boom')
    return undefined
  }, () => {})
  q.add('a')
  await sleep(150)
  q.shutDown()
  await workers
  assert.equal(maxConcurrentSameKey, 1)
  assert.ok(calls.length >= 4, `a ran ${calls.length} times: initial, dirty re-add and retries`)
  assert.equal(q.backoff.retries('a'), 0, 'forgotten after the success')
})

test('addAfter delivers later; shutDown wakes idle getters with undefined', async () => {
  const q = new WorkQueue()
  const keepAlive = setTimeout(() => {}, 1000) // the queue's timers are unref'd
  q.addAfter('x', 20)
  assert.equal(q.length, 0)
  const started = Date.now()
  assert.equal(await q.get(), 'x')
  assert.ok(Date.now() - started >= 15)
  const pending = q.get()
  q.shutDown()
  assert.equal(await pending, undefined)
  clearTimeout(keepAlive)
})
