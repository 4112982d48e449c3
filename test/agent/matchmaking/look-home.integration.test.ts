// A peer alone under the leftover key looks under its Moshpit key again once the followers' usual
// arrival time has passed there (Matchmaker.peekHome). That time is capped at a declaration, and in a
// swarm whose followers often come late (freezes, trainers on their own cadence) it reached the cap:
// counted from the current declaration, which starts afresh every averagingExpiration, the look was
// never due, and a peer sat 14 s under the leftover key of an 8-agent churn run until its step failed
// while its key grouped at home every second. It counts from when the peer was first seen there.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startSwarm, fill, weightedMean, maxAbsDiff } from '../swarm-fixture.js'
import { ArrivalClock } from '../../../agent/matchmaking/arrivals.js'
import type { NamedTensor, StepResult } from '../../../agent/averager.js'

const tensors = (p: number): NamedTensor[] => [{ name: 'x', shape: [64], data: fill(64, p) }]
const sleep = async (ms: number): Promise<void> => { await new Promise(resolve => setTimeout(resolve, ms)) }
const LONER = 0
const KEY_MATES = [1, 2, 3]
/** The loner's declarations: its arrival time is as long as one. */
const LONER_EXPIRATION = 3
/** The key-mates' declarations: they wait this long for a fourth before assembling three. */
const MATES_EXPIRATION = 20

test('a peer alone under the leftover key goes home to key-mates that came after it left, though its arrival time is a whole declaration', { timeout: 90_000 }, async () => {
  // Followers came to the loner late before (as in a churn run): its arrival time is its whole declaration.
  const late = new ArrivalClock()
  for (let i = 0; i < 8; i++) late.record(0.9 * LONER_EXPIRATION)
  assert.equal(late.cutoff(0.5, LONER_EXPIRATION), LONER_EXPIRATION)
  const swarm = await startSwarm(4, {
    tensors,
    config: (p) => ({ targetGroupSize: 4, minGroupSize: 2, requestTimeout: 0.5, averagingExpiration: p === LONER ? LONER_EXPIRATION : MATES_EXPIRATION, initialGroupBits: '0' }),
    hooks: (p) => p === LONER ? { arrivals: late } : {}
  })
  try {
    // Alone under its key for a declaration, the loner goes to the leftover key.
    const home = swarm.averagers[LONER].currentGroupKey
    const leftovers = home.slice(0, -1)
    const lonerId = swarm.nodes[LONER].peerId.toString()
    const loner = swarm.averagers[LONER].step({ timeout: MATES_EXPIRATION / 2 }).then(r => r, (err: Error) => err)
    let there = false
    for (let i = 0; i < 200 && !there; i++) {
      const entries = await swarm.nodes[KEY_MATES[0]].services.rendezvous.find(leftovers).catch(() => [])
      there = entries.some(e => e.peerId === lonerId && e.looking)
      if (!there) await sleep(50)
    }
    assert.ok(there, 'the loner declared under the leftover key')
    // Then its key-mates step at home; their leader has no arrival times and would wait 20 s for a fourth.
    const started = Date.now()
    const mates = KEY_MATES.map(async p => await swarm.averagers[p].step({ timeout: 2 * MATES_EXPIRATION }))
    const outcome = await loner
    assert.ok(!(outcome instanceof Error), `the loner found no group: ${String(outcome)}`)
    const results: StepResult[] = [outcome, ...await Promise.all(mates)]
    for (const r of results) {
      assert.equal(r.peers.length, 4, `a group of ${r.peers.length}`)
      assert.equal(r.groupId, results[0].groupId)
    }
    // It looks home one declaration after it was first seen under the leftover key (~3 s), not never.
    const took = Date.now() - started
    assert.ok(took < MATES_EXPIRATION * 1000 / 2, `the group took ${took} ms after the key-mates began`)
    const members = [LONER, ...KEY_MATES]
    const mean = weightedMean(members.map(p => tensors(p)[0].data), members.map(() => 1))
    for (const p of members) assert.ok(maxAbsDiff(await swarm.averagers[p].withTensors(t => t[0].data), mean) < 1e-5)
  } finally {
    await swarm.stop()
  }
})
