// A peer frozen (SIGSTOP) in matchmaking: the others group without it, instead of waiting out a
// declaration. The frozen peer is a libp2p node whose liveness and join streams are opened but never
// answered, as a stopped process's never are; its rendezvous keeps serving (the replicas' own
// stand-ins are tested in test/agent/rendezvous/).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { Stream } from '@libp2p/interface'
import { startSwarm, fill, weightedMean, maxAbsDiff, type SwarmFixture } from '../swarm-fixture.js'
import { ArrivalClock, MIN_ARRIVALS } from '../../../agent/matchmaking/arrivals.js'
import { aliveProtocol, joinProtocol } from '../../../agent/matchmaking/join-protocol.js'
import { FramedStream } from '../../../agent/net/framed-stream.js'
import { ownAddrBytes } from '../../../agent/net/rpc.js'
import { MatchCode, MessageFromLeader } from '../../../agent/proto/averaging.js'
import type { SwarmNode } from '../../../agent/net/node.js'
import type { NamedTensor } from '../../../agent/averager.js'

const tensors = (p: number): NamedTensor[] => [{ name: 'x', shape: [128], data: fill(128, p) }]
/** Followers came 0.1 s after their leader declared, MIN_ARRIVALS times: a cutoff of 0.1 + 0.5 s. */
function seasoned (): ArrivalClock {
  const clock = new ArrivalClock()
  for (let i = 0; i < MIN_ARRIVALS; i++) clock.record(0.1)
  return clock
}
const EXPIRATION = 20
const REQUEST_TIMEOUT = 0.5
const FROZEN = 3
const LIVE = [0, 1, 2]

/** Streams opened to the frozen node are held, never read nor answered. */
const held: Stream[] = []

async function freezeLiveness (node: SwarmNode): Promise<void> {
  await node.unhandle(aliveProtocol('test'))
  await node.handle(aliveProtocol('test'), (stream) => { held.push(stream) }, { maxInboundStreams: 64 })
}

/** The frozen peer's declaration under the live peers' key: looking until `expiresIn` seconds from now. */
async function declareFrozen (swarm: SwarmFixture, expiresIn: number): Promise<void> {
  const node = swarm.nodes[FROZEN]
  await node.services.rendezvous.declare(swarm.averagers[LIVE[0]].currentGroupKey, {
    peerId: node.peerId.toString(), expiration: Date.now() / 1000 + expiresIn, looking: true, priority: 0, addrs: ownAddrBytes(node)
  })
}

async function liveStepsGroupWithoutIt (swarm: SwarmFixture): Promise<void> {
  const results = await Promise.all(LIVE.map(async p => await swarm.averagers[p].step({ timeout: 3 * EXPIRATION })))
  for (const r of results) assert.equal(r.peers.length, 3)
  const mean = weightedMean(LIVE.map(p => tensors(p)[0].data), [1, 1, 1])
  for (const p of LIVE) assert.ok(maxAbsDiff(await swarm.averagers[p].withTensors(t => t[0].data), mean) < 1e-5)
  // Waiting for the frozen peer takes the 20 s declaration (and its request timeout).
  for (const r of results) assert.ok(r.matchmakingMs < EXPIRATION * 1000 / 2, `matchmaking took ${r.matchmakingMs} ms`)
}

test('a leader does not wait out its declaration for a peer seen looking under its key that froze: it did not answer a liveness check', { timeout: 120_000 }, async () => {
  const swarm = await startSwarm(4, {
    tensors,
    config: () => ({ targetGroupSize: 4, minGroupSize: 2, requestTimeout: REQUEST_TIMEOUT, averagingExpiration: EXPIRATION }),
    hooks: () => ({ arrivals: seasoned() })
  })
  try {
    // Declared later than the live peers will (it ranks last: nobody asks it, it should ask), then froze.
    await freezeLiveness(swarm.nodes[FROZEN])
    await declareFrozen(swarm, 2 * EXPIRATION)
    await liveStepsGroupWithoutIt(swarm)
  } finally {
    for (const s of held.splice(0)) s.abort(new Error('test over'))
    await swarm.stop()
  }
})

test('followers a leader accepted before it froze leave it and group without it', { timeout: 120_000 }, async () => {
  const swarm = await startSwarm(4, {
    tensors,
    config: () => ({ targetGroupSize: 4, minGroupSize: 2, requestTimeout: REQUEST_TIMEOUT, averagingExpiration: EXPIRATION }),
    hooks: () => ({ arrivals: seasoned() })
  })
  const accepted = new Set<string>()
  try {
    // The frozen leader declared first (it outranks the live peers, who all ask it), accepted
    // whoever asked, then froze: its group never comes and it answers nothing more.
    const node = swarm.nodes[FROZEN]
    await node.unhandle(joinProtocol('test'))
    await node.handle(joinProtocol('test'), (stream, connection) => {
      held.push(stream)
      const framed = new FramedStream(stream, { maxFrameBytes: 1 << 20, maxQueuedFrames: 2 })
      void (async () => {
        if (await framed.read(5000).catch(() => null) == null) return
        accepted.add(connection.remotePeer.toString())
        await framed.write(MessageFromLeader.encode({ code: MatchCode.ACCEPTED, groupId: new Uint8Array(0), orderedPeerIds: [], gathered: [], suggestedLeader: new Uint8Array(0), reason: '' }))
      })().catch(() => {})
    }, { maxInboundStreams: 64 })
    await freezeLiveness(node)
    await declareFrozen(swarm, EXPIRATION / 2)
    await liveStepsGroupWithoutIt(swarm)
    assert.ok(accepted.size >= 1, 'the frozen leader had accepted followers')
  } finally {
    for (const s of held.splice(0)) s.abort(new Error('test over'))
    await swarm.stop()
  }
})
