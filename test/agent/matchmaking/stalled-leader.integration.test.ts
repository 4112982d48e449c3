// A leader whose process stalled across its expiration (SIGSTOP, a CPU-starved pod) wakes with its
// expiry timer overdue, and node runs timers before it reads the I/O that came in meanwhile. A
// follower that gave up on it during the stall reset its join stream, but the leader has not read
// that yet: assembling at once, it listed the follower in a group of two with a ghost (the chaos
// harness's freezes: 2.5-5 s lost by the woken leader, and the group's round kept local). The
// leader now reads that I/O before it assembles (Matchmaker.assembleOnExpiry).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startSwarm, fill } from '../swarm-fixture.js'
import { joinProtocol, MAX_LEADER_MESSAGE_BYTES } from '../../../agent/matchmaking/join-protocol.js'
import { openFramed } from '../../../agent/net/rpc.js'
import { JoinRequest, MatchCode, MessageFromLeader, PeerMode } from '../../../agent/proto/averaging.js'
import { schemaHash } from '../../../agent/schema.js'
import { DEFAULT_AVERAGER_CONFIG, type NamedTensor } from '../../../agent/averager.js'

const tensors = (p: number): NamedTensor[] => [{ name: 'x', shape: [64], data: fill(64, p) }]
const sleep = async (ms: number): Promise<void> => { await new Promise(resolve => setTimeout(resolve, Math.max(0, ms))) }

test('a leader that stalled across its expiration does not assemble with a follower that left it meanwhile', { timeout: 60_000 }, async () => {
  // A group of two may assemble, but only at the leader's expiration (a full group is four).
  const swarm = await startSwarm(2, { tensors, config: () => ({ targetGroupSize: 4, minGroupSize: 2, averagingExpiration: 2, requestTimeout: 1 }) })
  try {
    const [leaderNode, askerNode] = swarm.nodes
    const leaderId = leaderNode.peerId.toString()
    const stepping = swarm.averagers[0].step({ timeout: 3.5 }).then(r => r, (err: Error) => err)
    // The asker is a bare join client on the second node (its averager does not step): it sees the
    // leader's declaration, asks it, is accepted.
    const key = swarm.averagers[0].currentGroupKey
    let expiration: number | undefined
    for (let i = 0; i < 200 && expiration === undefined; i++) {
      const entries = await askerNode.services.rendezvous.find(key).catch(() => [])
      expiration = entries.find(e => e.peerId === leaderId && e.looking)?.expiration
      if (expiration === undefined) await sleep(10)
    }
    assert.ok(expiration !== undefined, 'the leader declared under its key')
    const framed = await openFramed(askerNode, leaderNode.peerId, joinProtocol('test'), { timeoutMs: 5000, maxFrameBytes: MAX_LEADER_MESSAGE_BYTES, maxQueuedFrames: 2 })
    await framed.write(JoinRequest.encode({
      schemaHash: schemaHash(tensors(1), DEFAULT_AVERAGER_CONFIG.compression, DEFAULT_AVERAGER_CONFIG.partSizeBytes),
      expiration: expiration + 1,
      groupKey: key,
      info: { mode: PeerMode.NODE, weight: 1, userData: new Uint8Array(0), dataPort: 0, addrs: [], dataAddrs: [], round: 0 },
      bringing: 0
    }))
    const first = await framed.read(5000)
    assert.ok(first != null)
    assert.equal(MessageFromLeader.decode(first).code, MatchCode.ACCEPTED, 'the asker is the leader\'s follower')
    // Shortly before the leader's expiration the follower gives up on it, and the process stalls
    // (a busy loop: no timer, no I/O) until well past that expiration. The stall is in the loop's
    // check phase (setImmediate), as a stopped process is stopped outside its timers: what runs first
    // after it is the next turn's timers, the leader's overdue expiry among them, and the follower's
    // reset (sent as the stall ends) is read only in the poll phase after them.
    await sleep(expiration * 1000 - Date.now() - 500)
    await new Promise<void>(resolve => {
      setImmediate(() => {
        framed.abort(new Error('the follower gave up on its leader'))
        const stallUntil = expiration! * 1000 + 400
        while (Date.now() < stallUntil) { /* stalled */ }
        resolve()
      })
    })
    const outcome = await stepping
    const grouped = outcome instanceof Error ? [] : outcome.peers
    assert.ok(!grouped.includes(askerNode.peerId.toString()), `the leader grouped with the follower that had left it: ${JSON.stringify(grouped)}`)
    assert.ok(outcome instanceof Error, 'nobody else was looking: no group')
  } finally {
    await swarm.stop()
  }
})
