import { test } from 'node:test'
import assert from 'node:assert/strict'
import { BufferPool } from '../../../../../agent/net/direct/threads/buffer-pool.js'
import { Outbox } from '../../../../../agent/net/direct/threads/outbox.js'
import { DataThreads } from '../../../../../agent/net/direct/threads/data-threads.js'

const nextTurn = async (): Promise<void> => { await new Promise(resolve => setImmediate(resolve)) }

test('buffer pool: a buffer given back is taken again for a part of its size, not for a much smaller one', () => {
  const pool = new BufferPool(1 << 20)
  const a = pool.take(65_560)
  assert.ok(a.byteLength >= 65_560 && a.byteLength % 4096 === 0, `rounded up to whole pages (${a.byteLength})`)
  pool.give(a)
  assert.equal(pool.take(65_000), a, 'reused for a part of about the same size')
  pool.give(a)
  assert.notEqual(pool.take(100), a, 'a 100-byte frame does not pin a 64 KiB buffer')
  assert.equal(pool.take(65_560), a)
})

test('buffer pool: holds at most its byte budget', () => {
  const pool = new BufferPool(3 * 8192)
  const buffers = Array.from({ length: 5 }, () => pool.take(8192))
  for (const b of buffers) pool.give(b)
  const back = new Set(Array.from({ length: 5 }, () => pool.take(8192)))
  assert.equal(buffers.filter(b => back.has(b)).length, 3, 'three fit the budget; the other two were let go')
})

test('outbox: messages of one turn leave in one batch, with their transfer lists, in order', async () => {
  const sent: Array<{ messages: number[], transfer: ArrayBuffer[] }> = []
  const outbox = new Outbox<number>((messages, transfer) => { sent.push({ messages, transfer }) })
  const bufs = [new ArrayBuffer(8), new ArrayBuffer(8)]
  outbox.post(1)
  outbox.post(2, [bufs[0]])
  outbox.post(3, [bufs[1]])
  assert.equal(sent.length, 0, 'nothing leaves before the turn ends')
  await nextTurn()
  assert.deepEqual(sent, [{ messages: [1, 2, 3], transfer: bufs }])
  outbox.post(4)
  await nextTurn()
  assert.deepEqual(sent[1].messages, [4], 'the next turn is a new batch')
})

test('data threads: ready resolves once every thread has loaded, and still resolves after they stopped', async () => {
  const pool = DataThreads.start(2)
  try {
    await pool.ready()
    assert.equal(pool.threads, 2)
  } finally {
    await pool.close()
  }
  // A stopped (or failed) thread answers nothing: ready must not wait for it.
  await pool.ready()
})
