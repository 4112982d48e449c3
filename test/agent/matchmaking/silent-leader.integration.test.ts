// A leader a follower found silent, which then asks that follower itself: it is alive, and the two
// group at once. The follower's first request to it and the liveness check it makes meanwhile go
// unanswered (held, as a leader stalled under load leaves them), so the follower marks it silent and
// skips it for the rest of its declaration; the leader, seeing the follower looking without joining,
// asks it (a reverse ask). Until the follower took that ask as proof of life and asked the leader again
// (it had been skipped as already asked), the two met only when a declaration ran out (a key of three
// split so under two CPU burners: RELIABILITY.md, "A silent leader that asked us was still skipped").
import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { Stream } from '@libp2p/interface'
import { startSwarm, fill, weightedMean, maxAbsDiff } from '../swarm-fixture.js'
import { aliveProtocol, joinProtocol } from '../../../agent/matchmaking/join-protocol.js'
import type { SwarmNode } from '../../../agent/net/node.js'
import { linesLog } from '../../../agent/log.js'

const EXPIRATION = 20
const REQUEST_TIMEOUT = 0.5
const LEADER = 0
const FOLLOWER = 1

/**
 * The first stream the node receives on each of these protocols is held unanswered (until the asker
 * gives up); later ones reach its handler. Before the handlers are registered.
 */
function holdFirstStreams (node: SwarmNode, protocols: readonly string[], held: Map<string, Stream>): void {
  const handle = node.handle.bind(node)
  node.handle = (async (registered: string | string[], handler: Parameters<SwarmNode['handle']>[1], options?: Parameters<SwarmNode['handle']>[2]) => {
    const protocol = Array.isArray(registered) ? registered[0] : registered
    if (!protocols.includes(protocol)) { await handle(registered, handler, options); return }
    const holding: typeof handler = async (stream, connection) => {
      if (!held.has(protocol)) { held.set(protocol, stream); return }
      await handler(stream, connection)
    }
    await handle(registered, holding, options)
  }) as SwarmNode['handle']
}

test('a leader a follower found silent that asks the follower in turn is alive again: they group at once, not at the end of a declaration', { timeout: 120_000 }, async () => {
  const held = new Map<string, Stream>()
  const logs: string[][] = [[], []]
  const swarm = await startSwarm(2, {
    tensors: (p) => [{ name: 'x', shape: [64], data: fill(64, p) }],
    config: () => ({ targetGroupSize: 2, minGroupSize: 2, requestTimeout: REQUEST_TIMEOUT, averagingExpiration: EXPIRATION }),
    hooks: (p, nodes) => {
      if (p === LEADER) holdFirstStreams(nodes[p], [joinProtocol('test'), aliveProtocol('test')], held)
      return { log: linesLog((msg) => { logs[p].push(msg) }, 'debug') }
    }
  })
  try {
    // The leader declares first, so it ranks above the follower, which asks it.
    const leading = swarm.averagers[LEADER].step({ timeout: 3 * EXPIRATION })
    await new Promise(resolve => setTimeout(resolve, 300))
    const following = swarm.averagers[FOLLOWER].step({ timeout: 3 * EXPIRATION })
    const results = await Promise.all([leading, following])
    const follower = logs[FOLLOWER].join('\n')
    assert.deepEqual([...held.keys()].sort(), [aliveProtocol('test'), joinProtocol('test')].sort(), 'the follower\'s first request and check were held')
    assert.match(follower, /leader \S+ did not answer within 0.5 s/, `the follower found the leader silent: ${follower}`)
    assert.match(follower, /asked us, so it is alive: no longer counted silent/, 'and alive again once it asked')
    for (const [p, r] of results.entries()) {
      assert.equal(r.peers.length, 2, `peer ${p} averaged in the pair`)
      assert.ok(r.matchmakingMs < EXPIRATION * 1000 / 2, `peer ${p}'s matchmaking took ${r.matchmakingMs} ms, not a declaration (${EXPIRATION} s); leader: ${logs[LEADER].join(' | ')}; follower: ${logs[FOLLOWER].join(' | ')}`)
    }
    const mean = weightedMean([0, 1].map(p => fill(64, p)), [1, 1])
    for (let p = 0; p < 2; p++) assert.ok(maxAbsDiff(await swarm.averagers[p].withTensors(t => t[0].data), mean) < 1e-6, `peer ${p} at the exact mean`)
  } finally {
    for (const s of held.values()) s.abort(new Error('test over'))
    await swarm.stop()
  }
})
