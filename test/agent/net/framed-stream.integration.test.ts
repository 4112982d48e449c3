import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createSwarmNode } from '../../../agent/net/node.js'
import { FramedStream } from '../../../agent/net/framed-stream.js'

// A reader slower than its writer pauses its libp2p stream (the frame queue is full); the writer
// finishes and closes its side while the last frames still wait, unread, in the paused stream. The
// reader must get every frame and then the clean end: the end comes after the bytes, not with the
// FIN. Over libp2p under two CPU burners a reducer's means were cut off mid-frame that way.

const PROTOCOL = '/avs/test/framed-end/1.0.0'
const FRAMES = 48
const FRAME_BYTES = 256 * 1024

test('a paused libp2p stream yields every frame before the end the writer sent', { timeout: 60_000 }, async () => {
  const [a, b] = await Promise.all([0, 1].map(async () => await createSwarmNode({ listen: ['/ip4/127.0.0.1/tcp/0'] })))
  try {
    const written = new Promise<void>((resolve, reject) => {
      void b.handle(PROTOCOL, (stream) => {
        void (async () => {
          const framed = new FramedStream(stream, { maxFrameBytes: FRAME_BYTES })
          for (let k = 0; k < FRAMES; k++) await framed.write(new Uint8Array(FRAME_BYTES).fill(k))
          await framed.closeWrite()
        })().then(resolve, reject)
      })
    })
    const stream = await a.dialProtocol(b.getMultiaddrs()[0], PROTOCOL)
    const reader = new FramedStream(stream, { maxFrameBytes: FRAME_BYTES, maxQueuedFrames: 2 })
    // Read slower than the writer writes: the stream pauses, and the writer's end comes while frames wait in it.
    for (let k = 0; k < FRAMES; k++) {
      const frame = await reader.read(10_000)
      assert.ok(frame != null, `frame ${k} of ${FRAMES} before the end`)
      assert.equal(frame.byteLength, FRAME_BYTES)
      assert.ok(frame[0] === k % 256 && frame[FRAME_BYTES - 1] === k % 256, `frame ${k} holds its own bytes`)
      await new Promise(resolve => setTimeout(resolve, 5))
    }
    assert.equal(await reader.read(10_000), null, 'then the clean end')
    await written
  } finally {
    await Promise.all([a.stop(), b.stop()])
  }
})
