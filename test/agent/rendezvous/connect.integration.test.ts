// connectPatiently, the connection a rendezvous request waits for: its patience is counted in time our
// own event loop was awake (agent/util/awake-timeout.ts), so a dial that completed while we stalled is
// used, not given up on (which suspected a live replica under two CPU burners); a peer that cannot be
// reached still fails the request within about the wait.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { multiaddr } from '@multiformats/multiaddr'
import { startConnectedNodes } from '../../../bench/lib/loopback-nodes.js'
import { connectPatiently, ConnectingError } from '../../../agent/rendezvous/connect.js'
import { createSwarmNode } from '../../../agent/net/node.js'
import { stall } from '../stall.js'

const WAIT_MS = 300

test('connectPatiently: a dial that completes while our own event loop stalls past the wait is used, not given up on', { timeout: 30_000 }, async () => {
  const [asker, peer] = await startConnectedNodes(2)
  try {
    await asker.hangUp(peer.peerId)
    assert.equal(asker.getConnections(peer.peerId).length, 0)
    const connecting = connectPatiently(asker, peer.peerId, WAIT_MS)
    stall(3 * WAIT_MS)
    await connecting
    assert.ok(asker.getConnections(peer.peerId).length > 0, 'connected')
  } finally {
    await Promise.all([asker.stop(), peer.stop()])
  }
})

test('connectPatiently: a dial still under way after the wait fails the request, and goes on', { timeout: 30_000 }, async () => {
  const asker = await createSwarmNode({ listen: ['/ip4/127.0.0.1/tcp/0'] })
  const silent = await createSwarmNode({ listen: ['/ip4/127.0.0.1/tcp/0'] })
  try {
    // An address that accepts TCP and then says nothing: the handshake never finishes.
    const { createServer } = await import('node:net')
    const server = createServer(() => {})
    await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
    const port = (server.address() as { port: number }).port
    await asker.peerStore.merge(silent.peerId, { multiaddrs: [multiaddr(`/ip4/127.0.0.1/tcp/${port}`)] })
    const started = performance.now()
    await assert.rejects(connectPatiently(asker, silent.peerId, WAIT_MS), (err: unknown) => err instanceof ConnectingError && /still connecting/.test(err.message))
    const took = performance.now() - started
    assert.ok(took >= WAIT_MS - 10 && took < 4 * WAIT_MS, `gave up after ${took.toFixed(0)} ms`)
    server.close()
  } finally {
    await Promise.all([asker.stop(), silent.stop()])
  }
})
