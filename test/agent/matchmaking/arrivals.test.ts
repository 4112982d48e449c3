import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { StoredEntry } from '../../../agent/rendezvous/store.js'
import { ArrivalClock, ARRIVALS_KEPT, MIN_ARRIVALS } from '../../../agent/matchmaking/arrivals.js'
import { assembleEarly, earlyAfter, earlyQuorum, extraGrace, leftoverSettled, missingPeers, nextWave, probeMissing, sharedArrivals, shortKeyFewest, silentUntil, SHORT_KEY_CUTOFFS, type EarlyView } from '../../../agent/matchmaking/decisions.js'

// Assembling short of the expiration, without a network: the time is a number the test sets.

const looking = (peerId: string, expiration = 115): StoredEntry => ({ peerId, expiration, looking: true, priority: 0, addrs: [] })

test('ArrivalClock: no cutoff before MIN_ARRIVALS; then median + max(k·σ̂, median, floor), at most the declaration', () => {
  const clock = new ArrivalClock()
  for (let i = 0; i < MIN_ARRIVALS - 1; i++) clock.record(0.2)
  assert.equal(clock.cutoff(0.5, 15), undefined)
  clock.record(0.2)
  // Every follower came 0.2 s after the declaration: MAD 0, the slack is the floor (0.5 s).
  assert.equal(clock.cutoff(0.5, 15), 0.7)
  // A spread of arrivals widens it: median 1, MAD 0.5 -> 1 + 4 · 1.4826 · 0.5.
  const spread = new ArrivalClock()
  for (const d of [0.5, 0.5, 0.5, 1, 1, 1.5, 1.5, 1.5]) spread.record(d)
  assert.ok(Math.abs(spread.cutoff(0.5, 15)! - (1 + 4 * 1.4826 * 0.5)) < 1e-9)
  assert.equal(spread.cutoff(0.5, 2), 2, 'never past the declaration')
  // Garbage is not an arrival; only the last ARRIVALS_KEPT count.
  for (const bad of [-1, NaN, Infinity]) spread.record(bad)
  assert.equal(spread.count, 8)
  for (let i = 0; i < ARRIVALS_KEPT; i++) spread.record(3)
  assert.equal(spread.count, ARRIVALS_KEPT)
  // All at 3 s: the slack is at least the median itself (a follower may take twice the typical).
  assert.equal(spread.cutoff(0.5, 15), 6)
})

test('earlyQuorum: a strict majority of the target and at least minGroupSize', () => {
  assert.equal(earlyQuorum(4, 2), 3)
  assert.equal(earlyQuorum(4, 4), 4)
  assert.equal(earlyQuorum(8, 2), 5)
  assert.equal(earlyQuorum(2, 1), 2)
  assert.equal(earlyQuorum(3, 2), 2)
})

test('assembleEarly: a quorum, past the cutoff, and nobody looking under the key who has not joined', () => {
  const followers = new Map([['b', 1], ['c', 1]])
  const view: EarlyView = { followers, declaredAt: 100, cutoff: 1.5, quorum: 3 }
  const key = [looking('a'), looking('b'), looking('c')]
  assert.equal(assembleEarly(view, key, 'a', 101.4), false, 'before the cutoff')
  assert.equal(assembleEarly(view, key, 'a', 101.5), true)
  // d declared under our key and has not joined yet: it is waited for, however late.
  assert.equal(assembleEarly(view, [...key, looking('d')], 'a', 105), false)
  // ...unless its declaration expired or it stopped looking (a killed or frozen member's leftovers).
  assert.equal(assembleEarly(view, [...key, looking('d', 104)], 'a', 105), true)
  assert.equal(assembleEarly(view, [...key, { ...looking('d'), looking: false }], 'a', 105), true)
  // No quorum, or no estimate yet: wait for the expiration as before.
  assert.equal(assembleEarly({ ...view, followers: new Map([['b', 1]]) }, key.slice(0, 2), 'a', 105), false)
  assert.equal(assembleEarly({ ...view, cutoff: undefined }, key, 'a', 105), false)
})

test('assembleEarly does not wait for a peer whose group and ours cannot make one group (noRoom), and still waits for the others', () => {
  // Two groups of three under the leftover key, each refused by the other as full: waiting for each
  // other, both ran out their declarations.
  const view: EarlyView = { followers: new Map([['b', 1], ['c', 1]]), declaredAt: 100, cutoff: 1.5, quorum: 3 }
  const key = [looking('a'), looking('b'), looking('c'), looking('d')]
  assert.equal(assembleEarly(view, key, 'a', 102), false, 'd may still join')
  assert.equal(assembleEarly({ ...view, noRoom: new Set(['d']) }, key, 'a', 102), true)
  assert.deepEqual(missingPeers({ ...view, noRoom: new Set(['d']) }, [...key, looking('e')], 'a', 102).map(e => e.peerId), ['e'])
  assert.equal(assembleEarly({ ...view, noRoom: new Set(['d']) }, [...key, looking('e')], 'a', 102), false, 'e may still join')
  // Not before the arrival cutoff, and not without a quorum, whatever noRoom says.
  assert.equal(assembleEarly({ ...view, noRoom: new Set(['d']) }, key, 'a', 101), false)
  assert.equal(assembleEarly({ ...view, followers: new Map([['b', 1]]), noRoom: new Set(['d']) }, key.slice(0, 2).concat(key[3]), 'a', 102), false)
})

test('under the leftover key a quorum waits for an ask, its refusal and a store after it could be seen there, not for the arrival cutoff', () => {
  // Blocking trainers under churn: arrivals spread over the whole declaration, the cutoff its cap (3 s),
  // and a group of three under the leftover key, refused by every other group there, waited it out.
  const settle = extraGrace(1, 0.05)
  assert.equal(settle, 1.05)
  const three: EarlyView = { followers: new Map([['b', 1], ['c', 1]]), declaredAt: 100, cutoff: 3, quorum: 3, settledAt: leftoverSettled(101.2, settle) }
  const key = [looking('a'), looking('b'), looking('c'), looking('d')]
  assert.ok(Math.abs(earlyAfter(three)! - 2.25) < 1e-9)
  assert.equal(assembleEarly(three, key, 'a', 102.2), false, 'not settled yet')
  assert.equal(assembleEarly(three, key, 'a', 102.3), false, 'd, looking there, may still join')
  assert.equal(assembleEarly({ ...three, noRoom: new Set(['d']) }, key, 'a', 102.3), true, 'refused as full: not waited for')
  // A cutoff sooner than the settling still counts; a group that came long ago is settled at once.
  assert.equal(earlyAfter({ ...three, cutoff: 1.5 }), 1.5)
  assert.equal(earlyAfter({ ...three, settledAt: 99 }), 0)
  // Below the quorum (a pair that came to meet other short groups), and without arrival times, nothing changes.
  assert.equal(earlyAfter({ ...three, followers: new Map([['b', 1]]), fewest: shortKeyFewest(2) }), 6)
  assert.equal(earlyAfter({ ...three, cutoff: undefined }), undefined)
})

test('nextWave: a quorum on its Moshpit key turns away an asker whose group formed after the quorum\'s leader began looking, and then assembles at once', () => {
  // Blocking trainers under churn: a short key's three waited past a training step and took a member of
  // the next wave as their fourth; from then on one group formed at a time, each waiting for the one before.
  const leader = { groupKey: 'k.0b1', leftoverKey: 'k.0b', followers: new Map([['b', 1], ['c', 1]]), startedAt: 100 }
  assert.equal(nextWave(leader, 3, 0.5, 101), true, 'its group formed at 100.5, after we began looking at 100')
  assert.equal(nextWave(leader, 3, 1.5, 101), false, 'its group formed at 99.5: our wave, late')
  assert.equal(nextWave(leader, 3, 0, 101), false, 'not said (no group yet, or an agent before it)')
  assert.equal(nextWave(leader, 3, Number.NaN, 101), false)
  assert.equal(nextWave({ ...leader, followers: new Map([['b', 1]]) }, 3, 0.5, 101), false, 'a pair needs every member it can get')
  assert.equal(nextWave({ ...leader, groupKey: 'k.0b' }, 3, 0.5, 101), false, 'under the leftover key groups of any wave meet')
  assert.equal(nextWave({ ...leader, leftoverKey: undefined }, 3, 0.5, 101), true, 'a swarm without a grid has waves too')
  // Once it turned one away, the quorum goes at once, with or without arrival times, and does not wait for that asker.
  const view: EarlyView = { followers: leader.followers, declaredAt: 100, cutoff: 3, quorum: 3, nextWaveAt: 101, otherWave: new Set(['d']) }
  assert.equal(earlyAfter(view), 1)
  assert.equal(earlyAfter({ ...view, cutoff: undefined }), 1)
  assert.equal(earlyAfter({ ...view, cutoff: 0.5 }), 0.5)
  assert.equal(earlyAfter({ ...view, followers: new Map([['b', 1]]), fewest: 2 }), 6, 'below the quorum nothing changes')
  const key = [looking('a'), looking('b'), looking('c'), looking('d')]
  assert.equal(assembleEarly(view, key, 'a', 101), true)
  assert.equal(assembleEarly({ ...view, otherWave: undefined }, key, 'a', 101), false, 'd, of our wave, may still join')
  assert.equal(assembleEarly(view, [...key, looking('e')], 'a', 101), false, 'e may still join')
  assert.equal(assembleEarly({ ...view, nextWaveAt: undefined }, key.slice(0, 3), 'a', 101), false, 'without it, the cutoff')
})

test('a key short of its quorum assembles early too, after SHORT_KEY_CUTOFFS cutoffs, with at least minGroupSize members and never alone', () => {
  const pair: EarlyView = { followers: new Map([['b', 1]]), declaredAt: 100, cutoff: 1.5, quorum: 3, fewest: shortKeyFewest(2) }
  const key = [looking('a'), looking('b')]
  assert.equal(SHORT_KEY_CUTOFFS, 2)
  assert.equal(earlyAfter(pair), 3)
  assert.equal(assembleEarly(pair, key, 'a', 101.5), false, 'one cutoff is not enough below the quorum')
  assert.equal(probeMissing(pair, 102.9), false)
  assert.equal(assembleEarly(pair, key, 'a', 103), true)
  // Someone seen looking under the key who has not joined is waited for, as with a quorum.
  assert.equal(assembleEarly(pair, [...key, looking('c')], 'a', 103), false)
  assert.equal(probeMissing(pair, 103), true, 'and probed from then on')
  // With a quorum, one cutoff.
  assert.equal(earlyAfter({ ...pair, followers: new Map([['b', 1], ['c', 1]]) }), 1.5)
  // minGroupSize 3: a pair waits for its expiration; a leader alone never assembles; no estimate, no early assembly.
  assert.equal(earlyAfter({ ...pair, fewest: shortKeyFewest(3) }), undefined)
  assert.equal(earlyAfter({ ...pair, followers: new Map(), fewest: shortKeyFewest(1) }), undefined)
  assert.equal(earlyAfter({ ...pair, cutoff: undefined }), undefined)
  // A view without `fewest` keeps to the quorum.
  assert.equal(earlyAfter({ ...pair, fewest: undefined }), undefined)
})

test('assembleEarly leaves out a peer seen looking only once it did not answer our probe within a request timeout, and only while its declaration stands', () => {
  const followers = new Map([['b', 1], ['c', 1]])
  const view: EarlyView = { followers, declaredAt: 100, cutoff: 1.5, quorum: 3 }
  const key = [looking('a'), looking('b'), looking('c'), looking('d', 130)]
  // d is waited for, and probed: past the cutoff, with a quorum.
  assert.deepEqual(missingPeers(view, key, 'a', 102).map(e => e.peerId), ['d'])
  assert.equal(probeMissing(view, 101.4), false, 'no probe before the cutoff')
  assert.equal(probeMissing({ ...view, followers: new Map([['b', 1]]) }, 105), false, 'no probe without a quorum')
  assert.equal(probeMissing(view, 101.5), true)
  assert.equal(assembleEarly(view, key, 'a', 102), false, 'not probed yet: waited for')
  // d did not answer at 102.5 (probe sent at 101.5, request timeout 1 s): gone until its declaration ends.
  const silent = new Map([['d', silentUntil(102.5, 130, 20)]])
  assert.equal(assembleEarly({ ...view, silent }, key, 'a', 102.5), true)
  // A silent peer never stands in for a quorum: b alone and silent d are still no quorum.
  assert.equal(assembleEarly({ ...view, followers: new Map([['b', 1]]), silent }, key.slice(0, 2).concat(key[3]), 'a', 102.5), false)
  // Someone else who answered is still waited for.
  assert.equal(assembleEarly({ ...view, silent }, [...key, looking('e')], 'a', 102.5), false)
  // d declared again later (it woke): a new declaration, no longer silent past the old one's end.
  assert.equal(assembleEarly({ ...view, silent }, [...key.slice(0, 3), looking('d', 140)], 'a', 131), false)
})

test('silentUntil: the end of the declaration the peer was seen under, at most one declaration from now', () => {
  assert.equal(silentUntil(100, 103, 3), 103)
  assert.equal(silentUntil(100, 200, 3), 103)
  assert.equal(silentUntil(100, undefined, 3), 103)
  assert.equal(silentUntil(100, 99, 3), 103, 'an expired declaration: one declaration from now')
})

test('sharedArrivals: a leader\'s delays within a declaration, at most one per other member', () => {
  assert.deepEqual(sharedArrivals([0.2, 1.1, 3], 4, 15), [0.2, 1.1, 3])
  // Not a time within a declaration: dropped, the rest kept.
  assert.deepEqual(sharedArrivals([-0.1, NaN, Infinity, 16, 0.4], 6, 15), [0.4])
  // More delays than followers: not the leader's own record, none taken.
  assert.deepEqual(sharedArrivals([0.2, 0.2, 0.2, 0.2], 4, 15), [])
  assert.deepEqual(sharedArrivals([], 2, 15), [])
})
