// The liveness check's verdicts between two real libp2p nodes: silence is concluded only over time our
// own event loop was awake (agent/util/awake-timeout.ts), and a peer that holds the check unanswered
// is still found silent within about the request timeout.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { Stream } from '@libp2p/interface'
import { startConnectedNodes } from '../../../bench/lib/loopback-nodes.js'
import { Liveness } from '../../../agent/matchmaking/liveness.js'
import { aliveProtocol } from '../../../agent/matchmaking/join-protocol.js'
import { stall } from '../stall.js'

const WITHIN_MS = 300

test('liveness: a live peer is not judged silent because our own event loop stalled past the timeout', { timeout: 30_000 }, async () => {
  const [asker, peer] = await startConnectedNodes(2)
  const served = new Liveness(peer, 'test')
  await served.serve(1000)
  try {
    const liveness = new Liveness(asker, 'test')
    assert.equal(await liveness.check(peer.peerId, WITHIN_MS), 'answered', 'a quick check')
    // The check's timer is armed, then this thread stalls three times its timeout: the answer can only
    // be read after the stall, and the timer fires first (timers run before I/O in node's loop).
    const checked = liveness.check(peer.peerId, WITHIN_MS)
    stall(3 * WITHIN_MS)
    assert.equal(await checked, 'answered', 'a stall of ours is no silence of theirs')
  } finally {
    await served.unserve()
    await Promise.all([asker.stop(), peer.stop()])
  }
})

test('liveness: a peer that holds the check unanswered is silent within about the timeout', { timeout: 30_000 }, async () => {
  const [asker, peer] = await startConnectedNodes(2)
  const held: Stream[] = []
  await peer.handle(aliveProtocol('test'), (stream) => { held.push(stream) }, { maxInboundStreams: 64 })
  try {
    const liveness = new Liveness(asker, 'test')
    const started = performance.now()
    assert.equal(await liveness.check(peer.peerId, WITHIN_MS), 'silent')
    const took = performance.now() - started
    assert.ok(took >= WITHIN_MS - 5 && took < 3 * WITHIN_MS, `silent after ${took.toFixed(0)} ms`)
  } finally {
    for (const s of held) s.abort(new Error('test over'))
    await Promise.all([asker.stop(), peer.stop()])
  }
})

// On the libp2p data path a check shares its connection with an all-reduce's parts: a byte the asker
// sends after the negotiation queued behind them for seconds, past the server's bound, and every
// check on a congested link ended "closed unanswered" (bench:links, 10 Mbit/s). The answer comes
// as the stream opens, whether or not the asker's byte ever arrives.
test('liveness: a live peer answers as the stream opens, without waiting for a byte from the asker', { timeout: 30_000 }, async () => {
  const [asker, peer] = await startConnectedNodes(2)
  const served = new Liveness(peer, 'test')
  await served.serve(1000)
  try {
    const stream = await asker.dialProtocol(peer.peerId, aliveProtocol('test'))
    // Nothing sent: the asker's byte is still queued behind megabytes, as on a congested link.
    const answer = await new Promise<Uint8Array | 'closed'>(resolve => {
      stream.addEventListener('message', (e) => { resolve(new Uint8Array(e.data.subarray())) }, { once: true })
      stream.addEventListener('close', () => { resolve('closed') }, { once: true })
    })
    assert.deepEqual(answer, new Uint8Array([1]), 'answered, not closed at the server\'s bound')
    stream.abort(new Error('checked'))
  } finally {
    await served.unserve()
    await Promise.all([asker.stop(), peer.stop()])
  }
})
