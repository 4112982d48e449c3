import { test } from 'node:test'
import assert from 'node:assert/strict'
import { FrameQueue, frameHeader } from '../../../agent/net/frame-channel.js'
import { stall } from '../stall.js'

function queue (): FrameQueue {
  return new FrameQueue({ pause: () => {}, resume: () => {}, violate: () => {}, describePeer: () => 'peer' }, { maxFrameBytes: 1024, maxQueuedFrames: 4 })
}

function frame (bytes: number[]): Uint8Array {
  const header = frameHeader(bytes.length)
  return Uint8Array.from([...header, ...bytes])
}

test('FrameQueue read timeout: a silent source times out on time', async () => {
  const q = queue()
  const started = performance.now()
  await assert.rejects(q.read(60), /no message from peer within 60 ms/)
  const took = performance.now() - started
  assert.ok(took >= 55 && took < 200, `timed out after ${took.toFixed(0)} ms`)
})

test('FrameQueue read timeout: a frame that came while our own loop stalled past the timeout is read, not timed out', async () => {
  const q = queue()
  const reading = q.read(60)
  // The read's timer comes due during the stall and runs first after it (the earliest timer); the
  // frame comes on a timer armed after the stall, as I/O that arrived during it is read after the timers.
  stall(150)
  setTimeout(() => { q.push(frame([7, 8])) }, 0)
  assert.deepEqual(await reading, new Uint8Array([7, 8]))
  // Later reads are timed as before.
  await assert.rejects(q.read(40), /within 40 ms/)
})
