import { test } from 'node:test'
import assert from 'node:assert/strict'
import { MatchCode, PeerMode, type JoinRequest, type PeerInfo } from '../../../agent/proto/averaging.js'
import type { StoredEntry } from '../../../agent/rendezvous/store.js'
import {
  MAX_HEARD, acceptsPartial, aloneCutoff, aloneEarly, aloneUnderKey, bestCandidate, meetDue, meetUnderLeftovers, peekHomeDue, enoughToAssemble, extraUnderKey, followRedirect, formedWithoutUs, groupFull, heardEntry, isSilent, noRoomFor, outranks, reasonToReject,
  othersLooking, redirectKey, EXTRA_LOOKS, extraGrace, extrasLookAt, extrasLookDue, reverseAskAfter, reverseCandidate, reverseKey, seenAfterVisible, shortUnderKey, triedKey, validInfo, withHeard, withoutGrouped, type LeaderConfig, type LeaderState
} from '../../../agent/matchmaking/decisions.js'
import { MAX_BASE_ID_BYTES, MAX_GATHER_BYTES } from '../../../agent/matchmaking/group-info.js'

// Matchmaking's decisions without a network: the time is a number the test sets (a fake clock).

const SCHEMA = new Uint8Array([1, 2, 3])
const KEY = 'avs.grid0.0_1'
const LEADER: LeaderConfig = { selfId: 'peer-L', mode: PeerMode.NODE, schemaHash: SCHEMA, targetGroupSize: 4 }

function info (over: Partial<PeerInfo> = {}): PeerInfo {
  return { mode: PeerMode.NODE, weight: 1, userData: new Uint8Array(0), dataPort: 0, addrs: [], dataAddrs: [], round: 0, ...over }
}

function request (over: Partial<JoinRequest> = {}): JoinRequest {
  return { schemaHash: SCHEMA, expiration: 110, groupKey: KEY, info: info(), bringing: 0, acceptsPartial: false, confirms: false, averagedAgo: 0, ...over }
}

function leading (over: Partial<LeaderState> = {}, followers: string[] = []): LeaderState {
  return {
    assembled: false,
    groupKey: KEY,
    declaredExpiration: 100,
    currentLeader: null,
    followers: new Map(followers.map(f => [f, {}])),
    ...over
  }
}

function entry (peerId: string, expiration: number, looking = true): StoredEntry {
  return { peerId, expiration, looking, priority: 0, addrs: [] }
}

test('a leader accepts a well-formed request under its key from a follower it outranks', () => {
  assert.equal(reasonToReject(LEADER, leading(), request(), 'peer-F'), null)
  assert.equal(reasonToReject(LEADER, leading(), request({ expiration: 100 }), 'peer-Z'), null, 'the same expiration, and a larger peer id than the leader\'s')
})

test('a peer with no search under way, or whose group already assembled, is not looking for a group', () => {
  assert.equal(reasonToReject(LEADER, null, request(), 'peer-F')?.code, MatchCode.NOT_LOOKING_FOR_GROUP)
  assert.equal(reasonToReject(LEADER, leading({ assembled: true }), request(), 'peer-F')?.code, MatchCode.NOT_LOOKING_FOR_GROUP)
})

test('a client-mode peer never leads: every request it gets is a protocol violation', () => {
  const rejection = reasonToReject({ ...LEADER, mode: PeerMode.CLIENT }, leading(), request(), 'peer-F')
  assert.deepEqual(rejection, { code: MatchCode.PROTOCOL_VIOLATION, reason: 'a client-mode peer cannot lead' })
})

test('a malformed request (no info, non-finite expiration, empty schema, bad weight, round, bandwidth or oversized gather) is a protocol violation', () => {
  const malformed: Array<[string, JoinRequest]> = [
    ['no info', request({ info: undefined })],
    ['NaN expiration', request({ expiration: NaN })],
    ['infinite expiration', request({ expiration: Infinity })],
    ['empty schema hash', request({ schemaHash: new Uint8Array(0) })],
    ['NaN weight', request({ info: info({ weight: NaN }) })],
    ['negative weight', request({ info: info({ weight: -1 }) })],
    ['fractional round', request({ info: info({ round: 1.5 }) })],
    ['negative round', request({ info: info({ round: -1 }) })],
    ['negative bandwidth', request({ info: info({ bandwidth: -1 }) })],
    ['infinite bandwidth', request({ info: info({ bandwidth: Infinity }) })],
    ['NaN bandwidth', request({ info: info({ bandwidth: NaN }) })],
    ['gather one byte too long', request({ info: info({ userData: new Uint8Array(MAX_GATHER_BYTES + 1) }) })]
  ]
  for (const [what, r] of malformed) {
    assert.deepEqual(reasonToReject(LEADER, leading(), r, 'peer-F'), { code: MatchCode.PROTOCOL_VIOLATION, reason: 'malformed join request' }, what)
  }
  assert.equal(reasonToReject(LEADER, leading(), request({ info: info({ userData: new Uint8Array(MAX_GATHER_BYTES) }) }), 'peer-F'), null, 'a gather of exactly MAX_GATHER_BYTES is allowed')
})

test('a request for another tensor schema or another group key is refused, naming the key the leader is on', () => {
  assert.equal(reasonToReject(LEADER, leading(), request({ schemaHash: new Uint8Array([1, 2, 4]) }), 'peer-F')?.code, MatchCode.BAD_SCHEMA_HASH)
  assert.equal(reasonToReject(LEADER, leading(), request({ schemaHash: new Uint8Array([1, 2]) }), 'peer-F')?.code, MatchCode.BAD_SCHEMA_HASH)
  assert.deepEqual(reasonToReject(LEADER, leading(), request({ groupKey: 'avs.leftovers' }), 'peer-F'), { code: MatchCode.BAD_GROUP_KEY, reason: `leader is on ${KEY}` })
})

test('a leader searching for a round over a subset of the tensors checks joiners against that subset\'s schema', () => {
  const subset = new Uint8Array([7, 7, 7])
  assert.equal(reasonToReject(LEADER, leading({ schemaHash: subset }), request(), 'peer-F')?.code, MatchCode.BAD_SCHEMA_HASH, 'a peer averaging all tensors')
  assert.equal(reasonToReject(LEADER, leading({ schemaHash: subset }), request({ schemaHash: new Uint8Array([7, 7, 8]) }), 'peer-F')?.code, MatchCode.BAD_SCHEMA_HASH, 'a peer averaging another subset')
  assert.equal(reasonToReject(LEADER, leading({ schemaHash: subset }), request({ schemaHash: subset }), 'peer-F'), null, 'a peer averaging the same subset')
})

test('a leader that has not declared yet, or that the follower outranks, refuses it', () => {
  assert.equal(reasonToReject(LEADER, leading({ declaredExpiration: null }), request(), 'peer-F')?.code, MatchCode.NOT_DECLARED)
  assert.equal(reasonToReject(LEADER, leading({ declaredExpiration: 110.001 }), request({ expiration: 110 }), 'peer-F')?.code, MatchCode.BAD_EXPIRATION_TIME)
  // At equal expirations the smaller peer id ranks first ('peer-A' < 'peer-L' < 'peer-Z'): unlike hivemind, ties are refused one way.
  assert.equal(reasonToReject(LEADER, leading({ declaredExpiration: 110 }), request({ expiration: 110 }), 'peer-A')?.code, MatchCode.BAD_EXPIRATION_TIME)
  assert.equal(reasonToReject(LEADER, leading({ declaredExpiration: 110 }), request({ expiration: 110 }), 'peer-Z'), null)
})

test('a peer that follows another leader is not a leader and points the asker at its own leader', () => {
  const rejection = reasonToReject(LEADER, leading({ currentLeader: 'peer-Z' }), request(), 'peer-F')
  assert.deepEqual(rejection, { code: MatchCode.NOT_A_LEADER, reason: 'leader follows another peer', suggestedLeader: 'peer-Z' })
})

test('a peer already among the followers, or the leader itself, is a duplicate', () => {
  assert.equal(reasonToReject(LEADER, leading({}, ['peer-F']), request(), 'peer-F')?.code, MatchCode.DUPLICATE_PEER_ID)
  assert.equal(reasonToReject(LEADER, leading(), request(), LEADER.selfId)?.code, MatchCode.DUPLICATE_PEER_ID)
})

test('a leader with targetGroupSize - 1 followers is full; one fewer still takes a newcomer', () => {
  assert.equal(reasonToReject(LEADER, leading({}, ['a', 'b', 'c']), request(), 'peer-F')?.code, MatchCode.GROUP_IS_FULL)
  assert.equal(reasonToReject(LEADER, leading({}, ['a', 'b']), request(), 'peer-F'), null)
  assert.equal(groupFull(3, 4), true)
  assert.equal(groupFull(2, 4), false)
})

test('a leader with room for an asking leader but not all it brings takes it with those that fit, where it accepts that (on its Moshpit key)', () => {
  // Two members, a leader of three asking: room for the asker and one of its two followers.
  assert.equal(reasonToReject(LEADER, leading({}, ['a']), request({ bringing: 2, acceptsPartial: true }), 'peer-F'), null)
  assert.equal(noRoomFor(1, 2, 4), 1)
  assert.equal(noRoomFor(0, 2, 4), 0, 'three of them and the leader: four')
  assert.equal(noRoomFor(1, 1, 4), 0)
  assert.equal(noRoomFor(2, 3, 4), 3, 'the asker alone fits')
  assert.equal(reasonToReject(LEADER, leading({}, ['a', 'b', 'c']), request({ bringing: 1, acceptsPartial: true }), 'peer-F')?.code, MatchCode.GROUP_IS_FULL, 'no room for the asker itself')
  assert.equal(acceptsPartial({ groupKey: KEY, leftoverKey: 'avs.leftovers' }), true)
  assert.equal(acceptsPartial({ groupKey: 'avs.leftovers', leftoverKey: 'avs.leftovers' }), false, 'under the leftover key a group stays whole')
  assert.equal(acceptsPartial({ groupKey: KEY }), false, 'nowhere for those sent away to go')
})

test('a leader without room for an asking leader and the followers it brings refuses it: that group stays whole', () => {
  // Two members and a pair's leader asking: 2 + 1 + 1 > 4. One member and the pair: exactly 4.
  assert.deepEqual(reasonToReject(LEADER, leading({}, ['a', 'b']), request({ bringing: 1 }), 'peer-F'),
    { code: MatchCode.GROUP_IS_FULL, reason: 'no room for the asker and the 1 follower(s) it leads' })
  assert.equal(reasonToReject(LEADER, leading({}, ['a']), request({ bringing: 1 }), 'peer-F'), null)
  assert.equal(reasonToReject(LEADER, leading(), request({ bringing: 2 }), 'peer-F'), null, 'three of them and the leader: four')
  assert.equal(reasonToReject(LEADER, leading(), request({ bringing: 3 }), 'peer-F')?.code, MatchCode.GROUP_IS_FULL)
  assert.equal(reasonToReject(LEADER, leading(), request({ bringing: 1024 }), 'peer-F')?.code, MatchCode.PROTOCOL_VIOLATION, 'more than any group holds')
})

test('the first failing check wins, in hivemind\'s order', () => {
  // Each request fails the named check and every check after it.
  const everythingWrong = request({ schemaHash: new Uint8Array([9]), groupKey: 'other', expiration: 50 })
  const full = leading({ currentLeader: 'peer-Z' }, ['a', 'b', 'c', 'peer-F'])
  assert.equal(reasonToReject(LEADER, { ...full, assembled: true }, request({ info: undefined }), 'peer-F')?.code, MatchCode.NOT_LOOKING_FOR_GROUP)
  assert.equal(reasonToReject({ ...LEADER, mode: PeerMode.CLIENT }, full, request({ info: undefined }), 'peer-F')?.reason, 'a client-mode peer cannot lead')
  assert.equal(reasonToReject(LEADER, full, everythingWrong, 'peer-F')?.code, MatchCode.BAD_SCHEMA_HASH)
  assert.equal(reasonToReject(LEADER, { ...full, declaredExpiration: null }, request({ groupKey: 'other', expiration: 50 }), 'peer-F')?.code, MatchCode.BAD_GROUP_KEY)
  assert.equal(reasonToReject(LEADER, { ...full, declaredExpiration: null }, request({ expiration: 50 }), 'peer-F')?.code, MatchCode.NOT_DECLARED)
  // A follower names its leader to a better-ranked asker too, whose expiration that leader's decides against.
  assert.deepEqual(reasonToReject(LEADER, full, request({ expiration: 50 }), 'peer-F'), { code: MatchCode.BAD_EXPIRATION_TIME, reason: 'leader expires after the follower', suggestedLeader: 'peer-Z' })
  assert.deepEqual(reasonToReject(LEADER, { ...full, currentLeader: null }, request({ expiration: 50 }), 'peer-F'), { code: MatchCode.BAD_EXPIRATION_TIME, reason: 'leader expires after the follower' })
  assert.equal(reasonToReject(LEADER, full, request(), 'peer-F')?.code, MatchCode.NOT_A_LEADER)
  assert.equal(reasonToReject(LEADER, { ...full, currentLeader: null }, request(), 'peer-F')?.code, MatchCode.DUPLICATE_PEER_ID)
  assert.equal(reasonToReject(LEADER, { ...full, currentLeader: null }, request(), 'peer-G')?.code, MatchCode.GROUP_IS_FULL)
})

test('the earlier expiration outranks; at equal expirations the smaller peer id does; nobody outranks itself', () => {
  assert.equal(outranks(10, 'z', 11, 'a'), true)
  assert.equal(outranks(11, 'a', 10, 'z'), false)
  assert.equal(outranks(10, 'a', 10, 'b'), true)
  assert.equal(outranks(10, 'b', 10, 'a'), false)
  assert.equal(outranks(10, 'a', 10, 'a'), false)
  assert.equal(outranks(10, 'a', Infinity, 'a'), true, 'a client (expiration +inf) is outranked by anyone')
})

test('the best candidate is the best-ranked looking, unexpired, untried peer that outranks us', () => {
  const now = 100
  const view = { selfId: 'me', myExpiration: 120, tried: new Set<string>(), now }
  const entries = [
    entry('p-late', 119),
    entry('p-b', 110),
    entry('p-a', 110),
    entry('p-after-me', 121)
  ]
  assert.equal(bestCandidate(entries, view)?.peerId, 'p-a', 'equal expirations: the smaller id')
  assert.equal(bestCandidate(entries.slice(0, 1).concat(entry('p-after-me', 121)), view)?.peerId, 'p-late')
  assert.equal(bestCandidate([entry('p-after-me', 121), entry('p-tie', 120)], view), null, 'nobody outranks us: "p-tie" > "me" at our expiration')
  assert.equal(bestCandidate([entry('a-tie', 120)], view)?.peerId, 'a-tie', 'at our own expiration a smaller id outranks us')
})

test('the best candidate skips entries that are not looking, expired, ourselves or already tried at that expiration', () => {
  const now = 100
  const entries = [
    entry('p-withdrawn', 101, false),
    entry('p-expired', 100),
    entry('me', 101),
    entry('p-tried', 102),
    entry('p-good', 103)
  ]
  const tried = new Set([triedKey('p-tried', 102), triedKey('p-good', 999)])
  assert.equal(bestCandidate(entries, { selfId: 'me', myExpiration: 120, tried, now })?.peerId, 'p-good')
  assert.equal(bestCandidate(entries.slice(0, 4), { selfId: 'me', myExpiration: 120, tried, now }), null)
  // A new declaration of a tried peer (another expiration) is a new candidate.
  assert.equal(bestCandidate([entry('p-tried', 104)], { selfId: 'me', myExpiration: 120, tried, now })?.peerId, 'p-tried')
  // The fake clock moves on: p-good expires.
  assert.equal(bestCandidate(entries, { selfId: 'me', myExpiration: 120, tried, now: 103 }), null)
})

test('a client (own expiration +inf) may ask anyone looking', () => {
  const view = { selfId: 'me', myExpiration: Infinity, tried: new Set<string>(), now: 100 }
  assert.equal(bestCandidate([entry('zz', 5000), entry('zy', 5000)], view)?.peerId, 'zy')
})

test('a leader assembles at expiry with at least one follower and minGroupSize members, never alone', () => {
  assert.equal(enoughToAssemble(0, 1), false, 'alone is no group, whatever minGroupSize says')
  assert.equal(enoughToAssemble(1, 2), true)
  assert.equal(enoughToAssemble(1, 3), false)
  assert.equal(enoughToAssemble(2, 3), true)
})

test('a peer moves to the leftover key only when nobody else looked under its key for a whole declaration', () => {
  const now = 100
  const search = { groupKey: KEY, leftoverKey: 'avs.leftovers', followers: new Map<string, unknown>() }
  const view = { readAt: 99.8, declaredUntil: 100, averagingExpiration: 3, storedAt: 97.1 }
  assert.equal(aloneUnderKey(search, [], 'me', now, view), true, 'nobody declared')
  assert.equal(aloneUnderKey(search, [entry('me', 120), entry('p-gone', 100), entry('p-done', 130, false)], 'me', now, view), true,
    'only ourselves, an expired entry and a withdrawn one')
  assert.equal(aloneUnderKey(search, [entry('p-other', 100.5)], 'me', now, view), false, 'someone else still looking')
  assert.equal(aloneUnderKey({ ...search, followers: new Map([['f', {}]]) }, [], 'me', now, view), false, 'we have a follower')
  assert.equal(aloneUnderKey({ ...search, leftoverKey: undefined }, [], 'me', now, view), false, 'no leftover key to go to')
  assert.equal(aloneUnderKey({ ...search, groupKey: 'avs.leftovers' }, [], 'me', now, view), false, 'already under the leftover key')
})

test('a view read early in the declaration (the process was frozen past its end) is no proof of being alone', () => {
  const search = { groupKey: KEY, leftoverKey: 'avs.leftovers', followers: new Map<string, unknown>() }
  // Declared at 97 until 100, read the key at 97.2, frozen, woke at 106.
  assert.equal(aloneUnderKey(search, [], 'me', 106, { readAt: 97.2, declaredUntil: 100, averagingExpiration: 3, storedAt: 97.1 }), false)
  assert.equal(aloneUnderKey(search, [], 'me', 106, { readAt: 98.6, declaredUntil: 100, averagingExpiration: 3, storedAt: 97.1 }), true, 'read in the second half')
})

test('a declaration stored late (its store outlived most of it, or all) is no proof of being alone: nobody could see it', () => {
  const search = { groupKey: KEY, leftoverKey: 'avs.leftovers', followers: new Map<string, unknown>() }
  // Declared at 80 until 100 (20 s); the replicas answered at 92 (8 s visible), at 101 (after its end), never.
  const view = { readAt: 99, declaredUntil: 100, averagingExpiration: 20 }
  assert.equal(aloneUnderKey(search, [], 'me', 100, { ...view, storedAt: 92 }), false, 'visible 8 of 20 s')
  assert.equal(aloneUnderKey(search, [], 'me', 101, { ...view, readAt: 101, storedAt: 101 }), false, 'stored already expired')
  assert.equal(aloneUnderKey(search, [], 'me', 100, { ...view, storedAt: Infinity }), false, 'never stored')
  assert.equal(aloneUnderKey(search, [], 'me', 100, { ...view, storedAt: 89 }), true, 'visible 11 of 20 s, and nobody came')
})

test('declarations under one key that were each seen too briefly add up: seen for half a declaration in all, nobody came', () => {
  const search = { groupKey: KEY, leftoverKey: 'avs.leftovers', followers: new Map<string, unknown>() }
  // A 20 s declaration visible 8 s, after earlier ones under the key visible 10.3 s in all.
  const view = { readAt: 99, declaredUntil: 100, averagingExpiration: 20, storedAt: 92 }
  assert.equal(aloneUnderKey(search, [], 'me', 100, { ...view, seenBefore: 0 }), false, '8 of 20 s')
  assert.equal(aloneUnderKey(search, [], 'me', 100, { ...view, seenBefore: 1.9 }), false, '9.9 s in all')
  assert.equal(aloneUnderKey(search, [], 'me', 100, { ...view, seenBefore: 10.3 }), true, '18.3 s in all')
  assert.equal(aloneUnderKey(search, [], 'me', 100, { ...view, storedAt: Infinity, seenBefore: 10.3 }), true, 'this one never stored, the earlier ones seen long enough')
  assert.equal(aloneUnderKey(search, [entry('p-other', 105)], 'me', 100, { ...view, seenBefore: 10.3 }), false, 'someone else looking now')
})

test('aloneCutoff: the followers\' usual arrival time; without one, half the declaration or three request timeouts before its end, whichever is later', () => {
  const view = { declaredAt: 100, expiration: 115, requestTimeout: 3 }
  assert.equal(aloneCutoff({ ...view, cutoff: 1.2 }), 1.2)
  assert.equal(aloneCutoff({ ...view, cutoff: undefined, requestTimeout: 2 }), 9, '15 s declared, 2 s requests: 6 s before the end')
  assert.equal(aloneCutoff({ ...view, cutoff: undefined }), 7.5, 'never before half the declaration')
  assert.equal(aloneCutoff({ ...view, cutoff: undefined, expiration: 104 }), 2, 'a declaration cut short by the step deadline')
})

test('aloneEarly: alone under its key past the followers\' usual arrival time, after a wide look, on a fresh view: to the leftover key before the declaration ends', () => {
  const search = { groupKey: KEY, leftoverKey: 'avs.leftovers', followers: new Map<string, unknown>() }
  // Declared at 100 for 15 s; followers usually come within 2 s.
  const view = { declaredAt: 100, storedAt: 100.05, expiration: 115, cutoff: 2, readAt: 102.3, widened: true, requestTimeout: 0.5 }
  assert.equal(aloneEarly(search, [entry('me', 115), entry('p-done', 115, false), entry('p-gone', 99)], 'me', 102.5, view), true)
  assert.equal(aloneEarly(search, [], 'me', 101.9, view), false, 'before the cutoff: key-mates may still come')
  assert.equal(aloneEarly(search, [], 'me', 102.5, { ...view, cutoff: undefined }), false, 'no arrivals seen yet: not at 2 s (aloneCutoff)')
  assert.equal(aloneEarly(search, [], 'me', 113.6, { ...view, cutoff: undefined, readAt: 113.5 }), true, 'no arrivals seen yet: three request timeouts before the declaration ends')
  assert.equal(aloneEarly(search, [], 'me', 113.4, { ...view, cutoff: undefined, readAt: 113.3 }), false, 'no arrivals seen yet: not before')
  assert.equal(aloneEarly(search, [], 'me', 102.5, { ...view, widened: false }), false, 'our replicas may have drifted from the key\'s: look wide first')
  assert.equal(aloneEarly(search, [], 'me', 103, { ...view, readAt: 102.3 }), false, 'a view older than a request timeout (frozen since?)')
  assert.equal(aloneEarly(search, [entry('p-late', 116)], 'me', 102.5, view), false, 'someone else looking under the key')
  assert.equal(aloneEarly(search, [], 'me', 102.5, { ...view, storedAt: 101 }), false, 'stored 1 s late: the cutoff counts from when others could see us')
  assert.equal(aloneEarly(search, [], 'me', 102.5, { ...view, storedAt: Infinity }), false, 'never stored')
  assert.equal(aloneEarly({ ...search, followers: new Map([['f', {}]]) }, [], 'me', 102.5, view), false, 'we lead someone: a short group, not alone')
  assert.equal(aloneEarly({ ...search, leftoverKey: undefined }, [], 'me', 102.5, view), false, 'no leftover key')
  assert.equal(aloneEarly({ ...search, groupKey: 'avs.leftovers' }, [], 'me', 102.5, view), false, 'already there')
})

test('peekHomeDue: alone under the leftover key past the usual arrival time, on a fresh view, once a request timeout: look home again', () => {
  // Visible under the leftover key since 100; followers usually come within 2 s.
  const search = { groupKey: 'avs.leftovers', homeKey: KEY, leftoverKey: 'avs.leftovers', followers: new Map<string, unknown>(), peekedHomeAt: -Infinity, visibleSince: 100 }
  const view = { cutoff: 2, readAt: 102.3, requestTimeout: 0.5, averagingExpiration: 3 }
  assert.equal(peekHomeDue(search, [entry('me', 115), entry('p-done', 115, false), entry('p-gone', 99)], 'me', 102.5, view), true)
  assert.equal(peekHomeDue(search, [], 'me', 101.9, view), false, 'before the cutoff: extras and short groups may still come')
  assert.equal(peekHomeDue(search, [], 'me', 102.5, { ...view, cutoff: undefined }), false, 'no arrivals seen yet: a whole declaration there first')
  assert.equal(peekHomeDue(search, [], 'me', 103, { ...view, cutoff: undefined, readAt: 102.9 }), true, 'no arrivals seen yet, a declaration (3 s) since we were seen there')
  assert.equal(peekHomeDue(search, [], 'me', 103, view), false, 'a view older than a request timeout')
  assert.equal(peekHomeDue(search, [entry('p-short', 116)], 'me', 102.5, view), false, 'someone else looking under the leftover key')
  assert.equal(peekHomeDue({ ...search, peekedHomeAt: 102.2 }, [], 'me', 102.5, view), false, 'looked home less than a request timeout ago')
  assert.equal(peekHomeDue({ ...search, peekedHomeAt: 102 }, [], 'me', 102.5, view), true, 'a request timeout after the last look')
  assert.equal(peekHomeDue({ ...search, followers: new Map([['f', {}]]) }, [], 'me', 102.5, view), false, 'we lead a group there')
  assert.equal(peekHomeDue({ ...search, groupKey: KEY }, [], 'me', 102.5, view), false, 'at home already')
  assert.equal(peekHomeDue({ ...search, homeKey: 'avs.leftovers' }, [], 'me', 102.5, view), false, 'the search began under the leftover key')
  assert.equal(peekHomeDue({ ...search, visibleSince: null }, [], 'me', 102.5, view), false, 'not stored there yet: nobody could have come for us')
  // The arrival time as long as a declaration (3 s): due once a declaration has passed there, whatever
  // declaration we are in now (we re-declared at 103, 0.5 s ago).
  assert.equal(peekHomeDue(search, [], 'me', 103.5, { ...view, cutoff: 3, readAt: 103.4 }), true, 'counted from when we were first seen there')
  assert.equal(peekHomeDue(search, [], 'me', 102.9, { ...view, cutoff: 3, readAt: 102.8 }), false, 'within the arrival time')
})


test('meetDue: a short group goes to meet others under the leftover key a request timeout after it declared, not before', () => {
  assert.equal(meetDue(100, 100.13, 3), false, 'its key-mates\' declarations may not be seen yet')
  assert.equal(meetDue(100, 103, 3), true)
  assert.equal(meetDue(100, 101.2, 1), true, 'a first look a request timeout after declaring (3-s declarations, 1-s requests) is unchanged')
})

test('meetUnderLeftovers: a group short of the early quorum meets other short groups under the leftover key', () => {
  assert.equal(meetUnderLeftovers(2, 4, 2), true, 'a pair, at groups of four (quorum 3)')
  assert.equal(meetUnderLeftovers(3, 4, 2), false, 'three of four: a quorum; only an extra completes it')
  assert.equal(meetUnderLeftovers(1, 4, 2), false, 'alone: aloneEarly and aloneUnderKey')
  assert.equal(meetUnderLeftovers(4, 8, 2), true, 'four of eight (quorum 5): another four fills it')
  assert.equal(meetUnderLeftovers(2, 3, 2), false, 'two of three is a quorum')
})

test('a leader refuses a follower whose codec timings the members would refuse: one such follower would spoil the group it joins', () => {
  // Every follower drops a BEGIN_ALLREDUCE whose gathered infos fail validInfo, while the leader
  // runs the round with them: a leader that accepted this follower would wait for a group that left.
  for (const bad of [{ secondsNone: NaN }, { secondsNone: -1 }, { secondsFloat16: Infinity }, { base: new Uint8Array(MAX_BASE_ID_BYTES + 1) }, { outerState: new Uint8Array(MAX_BASE_ID_BYTES + 1) }]) {
    assert.equal(validInfo(info(bad)), false)
    assert.deepEqual(reasonToReject(LEADER, leading(), request({ info: info(bad) }), 'peer-F'), { code: MatchCode.PROTOCOL_VIOLATION, reason: 'malformed join request' }, JSON.stringify(bad))
  }
  assert.equal(reasonToReject(LEADER, leading(), request({ info: info({ secondsNone: 0.5, secondsFloat16: 0 }) }), 'peer-F'), null)
  assert.equal(reasonToReject(LEADER, leading(), request({ info: info({ base: new Uint8Array(20) }) }), 'peer-F'), null, 'a base id as long as a group id')
})

test('a leader that did not answer within a request timeout is not asked again, as a candidate or through a redirect, while it counts as gone', () => {
  // F (frozen) outranks everybody; it did not answer us at 100.5, until its expiration 103.
  const silent = new Map([['F', 103]])
  const view = { selfId: 'me', myExpiration: 110, tried: new Set<string>(), silent, now: 101 }
  assert.equal(isSilent(silent, 'F', 101), true)
  assert.equal(isSilent(silent, 'F', 103), false, 'its declaration ended: it may be asked again when it declares anew')
  assert.equal(isSilent(silent, 'G', 101), false)
  assert.equal(bestCandidate([entry('F', 103), entry('G', 105)], view)?.peerId, 'G')
  // A new declaration of F after the old one ended is asked again (a stall is not forever).
  assert.equal(bestCandidate([entry('F', 106), entry('G', 108)], { ...view, now: 103.5 })?.peerId, 'F')
  // G follows F and refuses us with NOT_A_LEADER naming F: that redirect is ignored.
  assert.equal(followRedirect('F', 'me', new Set(), silent, 101), false)
  assert.equal(followRedirect('F', 'me', new Set(), silent, 103), true)
  assert.equal(followRedirect('H', 'me', new Set(), silent, 101), true)
  assert.equal(followRedirect('me', 'me', new Set(), silent, 101), false, 'never to ourselves')
  assert.equal(followRedirect('H', 'me', new Set([redirectKey('H')]), silent, 101), false, 'once per search')
})

test('reverseCandidate: with nobody better left, the best-ranked worse peer seen looking for a while that has not joined us', () => {
  // We are 'peer-L', expiring at 120. A follower of a leader we cannot see looks like any worse peer.
  const now = 100
  const seenSince = new Map([[triedKey('p-w1', 121), 98], [triedKey('p-w2', 122), 98], [triedKey('p-new', 120.5), 99.8], [triedKey('p-better', 119), 98], [triedKey('p-follower', 121.5), 98]])
  const view = { selfId: 'peer-L', myExpiration: 120, tried: new Set<string>(), now, followers: new Map([['p-follower', {}]]), targetGroupSize: 4, seenSince, after: 1 }
  const entries = [entry('p-w2', 122), entry('p-w1', 121), entry('p-new', 120.5), entry('p-better', 119), entry('p-follower', 121.5), entry('peer-L', 120), entry('p-gone', 121, false)]
  assert.equal(reverseCandidate(entries, view)?.peerId, 'p-w1', 'the best-ranked of the worse peers seen for 1 s or more')
  assert.equal(reverseCandidate(entries, { ...view, now: 100.8 })?.peerId, 'p-new', 'seen for a second too now, and ranks above p-w1')
  assert.equal(reverseCandidate(entries, { ...view, tried: new Set([reverseKey('p-w1', 121)]) })?.peerId, 'p-w2', 'asked once per declaration')
  assert.equal(reverseCandidate(entries, { ...view, silent: new Map([['p-w1', 130]]) })?.peerId, 'p-w2', 'not a peer that did not answer')
  assert.equal(reverseCandidate([entry('p-w1', 121)], { ...view, seenSince: new Map() }), null, 'never seen before: it gets a while to ask us')
  assert.equal(reverseCandidate([entry('p-better', 119), entry('p-follower', 121.5)], view), null, 'better peers are bestCandidate\'s; followers are ours')
  // A normal `tried` entry for the same declaration does not count as a reverse ask.
  assert.equal(reverseCandidate(entries, { ...view, tried: new Set([triedKey('p-w1', 121)]) })?.peerId, 'p-w1')
  // Full (followers unconfirmed count too): no room for anyone we ask, so nobody is asked.
  const full = new Map([['p-follower', {}], ['p-f2', {}], ['p-f3', {}]])
  assert.equal(reverseCandidate(entries, { ...view, followers: full }), null, 'a full leader asks nobody below it')
  assert.equal(reverseCandidate(entries, { ...view, followers: full, targetGroupSize: 5 })?.peerId, 'p-w1', 'room for one more')
  assert.equal(reverseAskAfter(3), 1)
  assert.equal(reverseAskAfter(0.5), 0.25)
})

test('withoutGrouped: the declarations of peers a full group listed leave our view, until they declare again', () => {
  const grouped = new Map([['p-a', 100], ['p-b', 100]])
  const entries = [entry('p-a', 110), entry('p-b', 114.9), entry('p-c', 110), entry('p-b', 116)]
  // Declarations made before they grouped (expiring within one 15 s declaration of it) are gone; p-b's later one stays.
  assert.deepEqual(withoutGrouped(entries, grouped, 15).map(e => `${e.peerId}@${e.expiration}`), ['p-c@110', 'p-b@116'])
  assert.deepEqual(withoutGrouped(entries, new Map(), 15), entries)
})

test('heardEntry and withHeard: a better-ranked asker joins our view unless the replicas hold it as fresh, within one declaration', () => {
  assert.deepEqual(heardEntry('p-a', 110, 100, 15), { peerId: 'p-a', expiration: 110, looking: true, priority: 0, addrs: [] })
  for (const bad of [100, 99, 115.5, NaN, Infinity]) assert.equal(heardEntry('p-a', bad, 100, 15), null, String(bad))
  const heard = new Map([['p-a', heardEntry('p-a', 110, 100, 15)!], ['p-old', heardEntry('p-old', 101, 100, 15)!]])
  assert.deepEqual(withHeard([entry('p-b', 112)], heard, 100).map(e => e.peerId), ['p-b', 'p-a', 'p-old'])
  assert.deepEqual(withHeard([entry('p-b', 112)], heard, 102).map(e => e.peerId), ['p-b', 'p-a'], 'expired heard entries drop out')
  assert.deepEqual(withHeard([entry('p-a', 110, false)], heard, 102), [entry('p-a', 110, false)], 'the replicas\' entry of that declaration (here withdrawn) wins')
  assert.deepEqual(withHeard([entry('p-a', 108)], heard, 102).map(e => `${e.peerId}@${e.expiration}`), ['p-a@108', 'p-a@110'], 'an older declaration of the replicas does not hide a newer heard one')
  assert.ok(MAX_HEARD >= 4)
})

test('extraUnderKey: turned away by the key\'s groups, nobody following us, nobody else looking: one too many, at once', () => {
  const now = 100
  const search = { groupKey: KEY, leftoverKey: 'avs.leftovers', followers: new Map<string, unknown>(), turnedAway: 1, seenLooking: new Set<string>() }
  assert.equal(extraUnderKey(search, [entry('me', 110), entry('p-done', 110, false), entry('p-gone', 99)], 'me', now), true)
  assert.equal(extraUnderKey({ ...search, turnedAway: 0 }, [], 'me', now), false, 'no sign of a group without us: alone, which aloneUnderKey judges at the expiration')
  // We ranked first and waited; the others, not seeing us, grouped and withdrew.
  const withdrawn = [entry('me', 110), entry('p-a', 110, false), entry('p-b', 110, false)]
  assert.equal(extraUnderKey({ ...search, turnedAway: 0, seenLooking: new Set(['p-a']) }, withdrawn, 'me', now), true)
  assert.equal(extraUnderKey({ ...search, turnedAway: 0, seenLooking: new Set(['p-c']) }, withdrawn, 'me', now), false, 'withdrawn entries of peers we never saw looking here say nothing')
  assert.equal(extraUnderKey({ ...search, turnedAway: 0, seenLooking: new Set(['p-a']), otherWave: new Set(['p-a']) }, withdrawn, 'me', now), false, 'the wave before ours (NEXT_WAVE named it) grouping without us says nothing')
  assert.equal(extraUnderKey(search, [entry('p-late', 112)], 'me', now), false, 'someone still looking under the key')
  assert.equal(extraUnderKey({ ...search, followers: new Map([['f', {}]]) }, [], 'me', now), false, 'we lead someone')
  assert.equal(extraUnderKey({ ...search, leftoverKey: undefined }, [], 'me', now), false, 'no leftover key')
  assert.equal(extraUnderKey({ ...search, groupKey: 'avs.leftovers' }, [], 'me', now), false, 'already there')
})

test('formedWithoutUs: a full group, or a peer that stopped looking once we could be seen under the key; not a wave that left before we came', () => {
  const now = 100
  const visibleSince = 99.5
  assert.equal(formedWithoutUs({ code: MatchCode.GROUP_IS_FULL }, now, visibleSince), true)
  assert.equal(formedWithoutUs({ code: MatchCode.NOT_LOOKING_FOR_GROUP, stoppedLooking: 0.2 }, now, visibleSince), true, 'its group formed 0.3 s after we were visible')
  assert.equal(formedWithoutUs({ code: MatchCode.NOT_LOOKING_FOR_GROUP, stoppedLooking: 0.001 }, now, visibleSince), true, 'assembled just now')
  assert.equal(formedWithoutUs({ code: MatchCode.NOT_LOOKING_FOR_GROUP, stoppedLooking: 0.8 }, now, visibleSince), false, 'it stopped 0.3 s before anyone could see us: the last wave, its declaration still stored')
  assert.equal(formedWithoutUs({ code: MatchCode.NOT_LOOKING_FOR_GROUP, stoppedLooking: 0.2 }, now, null), false, 'our declaration is not stored yet')
  assert.equal(formedWithoutUs({ code: MatchCode.NOT_LOOKING_FOR_GROUP, stoppedLooking: 0 }, now, visibleSince), true, 'an agent from before stopped_looking does not say when: counted, as before')
  assert.equal(formedWithoutUs({ code: MatchCode.NOT_LOOKING_FOR_GROUP }, now, null), true)
  for (const hostile of [Number.NaN, -5, Number.NEGATIVE_INFINITY]) assert.equal(formedWithoutUs({ code: MatchCode.NOT_LOOKING_FOR_GROUP, stoppedLooking: hostile }, now, visibleSince), true, `${hostile}: not a time, read as not said`)
  assert.equal(formedWithoutUs({ code: MatchCode.NOT_LOOKING_FOR_GROUP, stoppedLooking: Number.POSITIVE_INFINITY }, now, visibleSince), false)
  for (const code of [MatchCode.NOT_A_LEADER, MatchCode.BAD_EXPIRATION_TIME, MatchCode.BAD_GROUP_KEY, MatchCode.ACCEPTED]) assert.equal(formedWithoutUs({ code }, now, visibleSince), false)
  assert.equal(formedWithoutUs(null, now, visibleSince), false, 'no answer says nothing of a group')
})

test('seenAfterVisible: a view counts for withdrawn peers once we had been visible under the key for the settle time', () => {
  assert.equal(seenAfterVisible(100.6, 100, 0.5), true)
  assert.equal(seenAfterVisible(100.5, 100, 0.5), true)
  assert.equal(seenAfterVisible(100.2, 100, 0.5), false, 'the view of our own declaration\'s exchange may show the last wave looking')
  assert.equal(seenAfterVisible(200, null, 0.5), false, 'not stored yet')
})

test('shortUnderKey and othersLooking: a leader short of the target on its Moshpit key looks twice per declaration for extras', () => {
  const three = { groupKey: KEY, leftoverKey: 'avs.leftovers', followers: new Map<string, unknown>([['a', {}], ['b', {}]]) }
  assert.equal(shortUnderKey(three, 4, 0), true)
  assert.equal(shortUnderKey(three, 4, 1), true, 'once more after the grace')
  assert.equal(shortUnderKey(three, 4, EXTRA_LOOKS), false, 'looked twice in this declaration already')
  assert.equal(shortUnderKey(three, 3, 0), false, 'full')
  assert.equal(shortUnderKey({ ...three, followers: new Map() }, 4, 0), false, 'nobody to take along: alone is aloneUnderKey\'s')
  assert.equal(shortUnderKey({ ...three, groupKey: 'avs.leftovers' }, 4, 0), false, 'already under the leftover key')
  assert.equal(shortUnderKey({ ...three, leftoverKey: undefined }, 4, 0), false)
  assert.deepEqual(othersLooking([entry('me', 110), entry('p-x', 110), entry('p-done', 110, false), entry('p-gone', 99)], 'me', 100).map(e => e.peerId), ['p-x'])
})

test('extrasLookAt, extrasLookDue and extraGrace: the first look when it could assemble early or two request timeouts before the expiration, the second an ask and a store later, or half a request timeout before it', () => {
  assert.equal(extraGrace(0.5, 0.3), 0.8)
  assert.equal(extraGrace(3, -1), 3, 'a clock step back counts no store')
  assert.equal(extraGrace(3, NaN), 3)
  // A declaration ending at 115, requests of 0.5 s.
  assert.equal(extrasLookAt(0, 115, 0.5, -Infinity), 114, 'the first two request timeouts before the expiration')
  assert.equal(extrasLookAt(1, 115, 0.5, 100.8), 100.8, 'the second after the grace')
  assert.equal(extrasLookAt(1, 115, 0.5, 116), 114.75, 'the expiration does not wait for the grace')
  assert.equal(extrasLookAt(2, 115, 0.5, 100.8), Infinity, 'twice a declaration at most')
  assert.equal(extrasLookDue(0, false, 100, 114), false, 'not yet early')
  assert.equal(extrasLookDue(0, true, 100, 114), true)
  assert.equal(extrasLookDue(0, false, 114, 114), true, 'about to assemble at the expiration')
  assert.equal(extrasLookDue(1, true, 100, 100.8), false, 'within the grace: held')
  assert.equal(extrasLookDue(1, true, 100.8, 100.8), true)
  assert.equal(extrasLookDue(2, true, 200, 100.8), false, 'twice a declaration at most')
})
