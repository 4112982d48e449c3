import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { Stream } from '@libp2p/interface'
import { startConnectedNodes } from '../../../bench/lib/loopback-nodes.js'
import { capReceiveWindow } from '../../../agent/net/stream-window.js'

// capReceiveWindow reaches into yamux's own stream fields (libp2p's Stream interface has no window):
// this holds it to the yamux the agent ships, on both ends of a real stream, so an upgrade that
// renames them fails here instead of silently leaving the aggregate streams' windows at 16 MiB.
test('capReceiveWindow caps a real yamux stream\'s receive window on both ends, and its growth', { timeout: 60_000 }, async () => {
  const nodes = await startConnectedNodes(2)
  try {
    const accepted = Promise.withResolvers<Stream>()
    await nodes[1].handle('/avs-test/window/1.0.0', (stream) => { accepted.resolve(stream) })
    const outbound = await nodes[0].dialProtocol(nodes[1].peerId, '/avs-test/window/1.0.0')
    const inbound = await accepted.promise
    for (const stream of [outbound, inbound]) {
      const fields = stream as unknown as { recvWindow: number, maxStreamWindowSize: number }
      assert.equal(fields.maxStreamWindowSize, 16 * 1024 * 1024, 'the node lets windows grow to 16 MiB')
      assert.equal(capReceiveWindow(stream, 128 * 1024), true, 'a yamux stream')
      assert.deepEqual([fields.recvWindow, fields.maxStreamWindowSize], [128 * 1024, 128 * 1024])
      // Never raises a window.
      capReceiveWindow(stream, 1 << 30)
      assert.deepEqual([fields.recvWindow, fields.maxStreamWindowSize], [128 * 1024, 128 * 1024])
      stream.abort(new Error('done'))
    }
  } finally {
    await Promise.allSettled(nodes.map(async n => { await n.stop() }))
  }
})
