// Peers that step at their own pace meet in waves under a Moshpit key. A step that begins as the last
// wave leaves still sees that wave's declarations looking for a moment (their withdrawals, or a
// crashed peer's expiry, are on the way); asked, such a peer answers NOT_LOOKING_FOR_GROUP. That
// refusal once counted as "a group under our key formed without us": the new peer took itself for the
// key's extra, went to the leftover key and sat out its step there while the next wave grouped at home
// (8 agents at one fault per 15 s: every step over 4 s in a debug run, 6 to 16 s each). The refusal
// now says how long ago the refuser stopped looking, and counts only if that was after we could be seen.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startSwarm, fill, weightedMean, maxAbsDiff } from '../swarm-fixture.js'
import { ownAddrBytes } from '../../../agent/net/rpc.js'
import type { NamedTensor, StepResult } from '../../../agent/averager.js'

const tensors = (p: number): NamedTensor[] => [{ name: 'x', shape: [64], data: fill(64, p) }]
const EXPIRATION = 20
const FIRST = 0
const NEXT_WAVE = [1, 2, 3]
/** Its declaration is still stored looking, though it is not (a peer of the wave that just grouped). */
const LEFT = 4

test('a step that begins as the last wave under its key leaves stays home and leads the next wave: a refusal from a peer that stopped looking before we could be seen is not a group without us', { timeout: 120_000 }, async () => {
  // No arrival times yet: a short group assembles only at its expiration, so had the first peer gone to
  // the leftover key, the next wave (three) would have met it there only then, 20 s later.
  const swarm = await startSwarm(5, {
    tensors,
    config: () => ({ targetGroupSize: 4, minGroupSize: 2, requestTimeout: 0.5, averagingExpiration: EXPIRATION, initialGroupBits: '0' })
  })
  try {
    // The last wave's declaration, looking for one more second and ranking above ours (it expires
    // first), so the first peer asks it and is refused: it has not looked since it started.
    const left = swarm.nodes[LEFT]
    await left.services.rendezvous.declare(swarm.averagers[FIRST].currentGroupKey, {
      peerId: left.peerId.toString(), expiration: Date.now() / 1000 + 1, looking: true, priority: 0, addrs: ownAddrBytes(left)
    })
    const first = swarm.averagers[FIRST].step({ timeout: 2 * EXPIRATION })
    // The next wave comes once that declaration has expired.
    await new Promise(resolve => setTimeout(resolve, 1500))
    const results: StepResult[] = await Promise.all([first, ...NEXT_WAVE.map(async p => await swarm.averagers[p].step({ timeout: 2 * EXPIRATION }))])
    for (const r of results) {
      assert.equal(r.peers.length, 4, `a group of ${r.peers.length}`)
      assert.equal(r.groupId, results[0].groupId)
    }
    // Staying home, it leads the next wave as soon as it asks (~1.5 s); from the leftover key, 20 s.
    assert.ok(results[0].matchmakingMs < EXPIRATION * 1000 / 2, `the first peer's matchmaking took ${results[0].matchmakingMs} ms`)
    const members = [FIRST, ...NEXT_WAVE]
    const mean = weightedMean(members.map(p => tensors(p)[0].data), members.map(() => 1))
    for (const p of members) assert.ok(maxAbsDiff(await swarm.averagers[p].withTensors(t => t[0].data), mean) < 1e-5)
  } finally {
    await swarm.stop()
  }
})
