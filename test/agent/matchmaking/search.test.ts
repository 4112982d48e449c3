import { test } from 'node:test'
import assert from 'node:assert/strict'
import { MatchCode, PeerMode, type MessageFromLeader, type PeerInfo } from '../../../agent/proto/averaging.js'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { Search } from '../../../agent/matchmaking/search.js'
import { peerIdToBytes } from '../../../agent/net/rpc.js'
import { leaderMessage } from '../../../agent/matchmaking/leader-message.js'
import type { GroupInfo } from '../../../agent/matchmaking/group-info.js'

// Search's transitions (assemble, disband, adopt) with a fake clock: `now` is a number the test moves.

const decoder = new TextDecoder()

function info (weight: number): PeerInfo {
  return { mode: PeerMode.NODE, weight, userData: new Uint8Array(0), dataPort: 0, addrs: [], dataAddrs: [], round: 0 }
}

/** A leader declared until `expiration`, with followers whose second messages are recorded. */
function leaderWith (followers: string[], expiration = 100, joinedAfter: Array<number | undefined> = []): { search: Search, received: Map<string, MessageFromLeader[]> } {
  const search = new Search('leader', 'key', info(1), 1000)
  search.declaredExpiration = expiration
  const received = new Map<string, MessageFromLeader[]>()
  for (const [k, id] of followers.entries()) {
    received.set(id, [])
    search.followers.set(id, { peerId: id, info: info(k + 2), joinedAfter: joinedAfter[k], settle: (m) => { received.get(id)!.push(m) }, confirmed: true })
  }
  return { search, received }
}

async function settled (search: Search): Promise<GroupInfo | 'pending'> {
  return await Promise.race([search.done, new Promise<'pending'>(resolve => { setImmediate(() => { resolve('pending') }) })])
}

test('before its declared expiration a leader neither assembles nor disbands', async () => {
  const { search, received } = leaderWith(['f1'])
  assert.equal(search.expire(99.999, 2), null)
  assert.equal(search.assembled, false)
  assert.deepEqual(received.get('f1'), [])
  assert.equal(await settled(search), 'pending')
})

test('at its expiration a leader with enough followers assembles: every member learns the same group id, order and metadata', async () => {
  const { search, received } = leaderWith(['f1', 'f2'])
  const group = search.expire(100, 3)
  assert.ok(group != null && group !== 'disbanded')
  assert.equal(search.assembled, true)
  assert.deepEqual([...group.peerIds].sort(), ['f1', 'f2', 'leader'])
  assert.equal(group.peerIds[group.myIndex], 'leader')
  assert.equal(group.leader, 'leader')
  assert.equal(group.groupId.byteLength, 20)
  assert.deepEqual(group.infos.map(i => i.weight), group.peerIds.map(p => p === 'leader' ? 1 : p === 'f1' ? 2 : 3), 'each member keeps its own info')
  for (const f of ['f1', 'f2']) {
    const messages = received.get(f)!
    assert.equal(messages.length, 1, `${f} hears once`)
    assert.equal(messages[0].code, MatchCode.BEGIN_ALLREDUCE)
    assert.deepEqual(messages[0].groupId, group.groupId)
    assert.deepEqual(messages[0].orderedPeerIds.map(b => decoder.decode(b)), group.peerIds)
    assert.deepEqual(messages[0].gathered, group.infos)
  }
  assert.equal(search.followers.size, 0)
  assert.equal(await settled(search), group, 'the search is done with that group')
  assert.equal(search.expire(200, 3), null, 'an assembled search does nothing more')
})

test('at its expiration a leader with too few followers disbands them and stays unassembled', async () => {
  const { search, received } = leaderWith(['f1'])
  assert.equal(search.expire(100.5, 3), 'disbanded')
  assert.equal(search.assembled, false)
  assert.equal(search.followers.size, 0)
  const [message, ...more] = received.get('f1')!
  assert.equal(more.length, 0)
  assert.equal(message.code, MatchCode.GROUP_DISBANDED)
  assert.equal(message.suggestedLeader.byteLength, 0, 'no leader to point at')
  assert.equal(message.reason, 'too few peers before the leader expired')
  assert.equal(await settled(search), 'pending')
})

test('a leader alone at its expiration disbands even where minGroupSize is 1', () => {
  const { search } = leaderWith([])
  assert.equal(search.expire(100, 1), 'disbanded')
  assert.equal(search.assembled, false)
})

test('an undeclared search or one following a leader is not due at any time', () => {
  const undeclared = new Search('leader', 'key', info(1), 1000)
  assert.equal(undeclared.expire(1e9, 1), null)
  const { search, received } = leaderWith(['f1'])
  search.currentLeader = 'other'
  assert.equal(search.expire(500, 2), null)
  assert.equal(search.assembleIfEnough(2), null)
  assert.equal(search.assembleIfFull(2), false)
  assert.deepEqual(received.get('f1'), [])
})

test('a leader assembles as soon as its group is full, and not one follower earlier', () => {
  const { search } = leaderWith(['f1', 'f2'])
  assert.equal(search.assembleIfFull(4), false)
  assert.equal(search.assembled, false)
  search.followers.set('f3', { peerId: 'f3', info: info(4), settle: () => {}, confirmed: true })
  assert.equal(search.assembleIfFull(4), true)
  assert.equal(search.group?.peerIds.length, 4)
  assert.equal(search.assembleIfFull(4), false, 'already assembled')
})

test('joining a leader disbands our own followers towards it', () => {
  const { search, received } = leaderWith(['f1', 'f2'])
  search.currentLeader = 'new-leader'
  search.disband('new-leader', 'our leader joined another group')
  for (const f of ['f1', 'f2']) {
    const [message] = received.get(f)!
    assert.equal(message.code, MatchCode.GROUP_DISBANDED)
    assert.equal(decoder.decode(message.suggestedLeader), 'new-leader')
  }
  assert.equal(search.followers.size, 0)
})

test('joining a leader with no room for all our followers sends the last to join away (GROUP_IS_FULL), the rest towards it', () => {
  const { search, received } = leaderWith(['f1', 'f2', 'f3'])
  search.currentLeader = 'new-leader'
  search.disband('new-leader', 'our leader joined another group', 2)
  assert.equal(received.get('f1')![0].code, MatchCode.GROUP_DISBANDED)
  assert.equal(decoder.decode(received.get('f1')![0].suggestedLeader), 'new-leader')
  assert.equal(received.get('f1')![0].leaderKey, 'key')
  for (const f of ['f2', 'f3']) {
    assert.equal(received.get(f)!.length, 1)
    assert.equal(received.get(f)![0].code, MatchCode.GROUP_IS_FULL)
    assert.equal(received.get(f)![0].suggestedLeader.byteLength, 0)
    // The members of the group it knows: its new leader, itself, the follower sent on.
    assert.deepEqual(received.get(f)![0].orderedPeerIds.map(b => decoder.decode(b)), ['new-leader', 'leader', 'f1'])
  }
  // With the members our new leader's ACCEPTED listed (ourselves among them): each once.
  const listed = leaderWith(['k1', 'k2'])
  listed.search.disband('new-leader', 'our leader joined another group', 1, ['new-leader', 'm1', 'leader'])
  assert.deepEqual(listed.received.get('k2')![0].orderedPeerIds.map(b => decoder.decode(b)), ['new-leader', 'm1', 'leader', 'k1'])
  assert.equal(search.followers.size, 0)
  // More than we lead (a hostile leader's count): all are sent away, none twice; none without a new leader.
  const many = leaderWith(['g1', 'g2'])
  many.search.disband('new-leader', 'our leader joined another group', 99)
  assert.deepEqual([...many.received.values()].map(m => m.map(x => x.code)), [[MatchCode.GROUP_IS_FULL], [MatchCode.GROUP_IS_FULL]])
  const alone = leaderWith(['h1'])
  alone.search.disband(null, 'too few peers', 1)
  assert.equal(alone.received.get('h1')![0].code, MatchCode.GROUP_DISBANDED)
})

test('a leader whose expiration comes while its join request to a better leader is unanswered assembles once refused, not before', async () => {
  const { search, received } = leaderWith(['f1'])
  search.beginAsk()
  assert.equal(search.assembleIfEnough(2), null, 'the expiry timer waits for the answer')
  assert.equal(search.expire(100, 2), null, 'so does the search loop: no disband either')
  assert.equal(search.assembled, false)
  assert.deepEqual(received.get('f1'), [])
  const group = search.endAsk(2)
  assert.ok(group != null, 'refused: the expiration that came meanwhile assembles now')
  assert.deepEqual([...group.peerIds].sort(), ['f1', 'leader'])
  assert.equal(received.get('f1')![0].code, MatchCode.BEGIN_ALLREDUCE)
  assert.equal(await settled(search), group)
})

test('a leader accepted by a better leader after its own expiration follows it: it never assembled a group of its own, and its followers go there', async () => {
  const { search, received } = leaderWith(['f1'])
  search.beginAsk()
  assert.equal(search.assembleIfEnough(2), null)
  // ACCEPTED arrives: as askLeader does.
  search.currentLeader = 'better'
  search.disband('better', 'our leader joined another group')
  assert.equal(search.endAsk(2), null, 'following: nothing assembles')
  assert.equal(search.assembled, false)
  assert.equal(received.get('f1')![0].code, MatchCode.GROUP_DISBANDED)
  assert.equal(decoder.decode(received.get('f1')![0].suggestedLeader), 'better')
  const theirs: GroupInfo = { groupId: new Uint8Array(20).fill(9), peerIds: ['better', 'leader'], infos: [info(5), info(1)], myIndex: 1, leader: 'better' }
  assert.equal(search.adopt(theirs), theirs)
  assert.equal(await settled(search), theirs)
})

test('a leader whose ask stays unanswered past its expiration assembles anyway when the matchmaker says so (its followers will not wait longer)', async () => {
  const { search, received } = leaderWith(['f1'])
  search.beginAsk()
  assert.equal(search.waitingForAnswers, false)
  assert.equal(search.assembleIfEnough(2), null)
  assert.equal(search.waitingForAnswers, true)
  const group = search.assembleDespiteAsk(2)
  assert.ok(group != null)
  assert.equal(search.waitingForAnswers, false)
  assert.equal(received.get('f1')![0].code, MatchCode.BEGIN_ALLREDUCE)
  assert.equal(search.endAsk(2), null, 'the answer, when it comes, changes nothing: the group stands')
  assert.equal(await settled(search), group)
})

test('an ask answered before our expiration leaves the expiration as it was', () => {
  const { search } = leaderWith(['f1'])
  search.beginAsk()
  assert.equal(search.endAsk(2), null)
  assert.equal(search.assembled, false)
  assert.ok(search.assembleIfEnough(2) != null, 'the expiry timer, later, assembles as before')
})

test('a follower adopts its leader\'s group; the first group adopted stays the outcome', async () => {
  const search = new Search('me', 'key', info(1), 1000)
  const theirs: GroupInfo = { groupId: new Uint8Array(20).fill(7), peerIds: ['them', 'me'], infos: [info(2), info(1)], myIndex: 1, leader: 'them' }
  assert.equal(search.adopt(theirs), theirs)
  assert.equal(search.assembled, true)
  assert.equal(await settled(search), theirs)
  const other: GroupInfo = { ...theirs, groupId: new Uint8Array(20).fill(8) }
  assert.equal(search.adopt(other), theirs)
  assert.equal(search.assemble(), theirs, 'assembling after adopting keeps the adopted group')
})

test('BEGIN_ALLREDUCE lists when each follower joined after the declaration (those that joined before it declared have none); a disband lists none', () => {
  const { search, received } = leaderWith(['f1', 'f2', 'f3'], 100, [0.25, undefined, 1.5])
  search.assemble()
  for (const f of ['f1', 'f2', 'f3']) assert.deepEqual(received.get(f)![0].arrivalDelays, [0.25, 1.5])
  const other = leaderWith(['f1'], 100, [0.5])
  other.search.disband(null, 'test')
  assert.deepEqual(other.received.get('f1')![0].arrivalDelays, [])
})

test('a follower that brings followers of its own makes the leader wait for them until the bound, counted by whoever joins', () => {
  const { search } = leaderWith(['f1'])
  assert.equal(search.awaitingBrought(10), 0, 'nobody promised')
  search.expectBrought(0, 12)
  assert.equal(search.awaitingBrought(10), 0, 'bringing nobody promises nothing')
  // A pair's leader joins, bringing its one follower: a group of 4 is expected until t = 12.
  search.followers.set('p1', { peerId: 'p1', info: info(3), settle: () => {}, confirmed: true })
  search.expectBrought(1, 12)
  assert.equal(search.awaitingBrought(10), 1)
  assert.equal(search.awaitingBrought(12), 0, 'past the bound it no longer waits')
  search.followers.set('p2', { peerId: 'p2', info: info(4), settle: () => {}, confirmed: true })
  assert.equal(search.awaitingBrought(11), 0, 'the brought follower came')
  // The bringer leaves before its follower comes: one promised place stays open, until the bound.
  search.followers.delete('p1')
  assert.equal(search.awaitingBrought(11), 1)
})

test('entering another key forgets what the search learned under the old one, and keeps its followers, silences and first sightings', () => {
  const { search } = leaderWith(['f1'])
  search.tried.add('a@1')
  search.heard.set('b', { peerId: 'b', expiration: 5, looking: true, priority: 0, addrs: [] })
  search.turnedAway = 2
  search.grouped.set('g', 1)
  search.noteNoRoom('n', 4)
  search.cameFor.add('x')
  search.seenLooking.add('c')
  search.visibleSince = 3
  search.aloneSeconds = 4
  search.silent.set('d', 9)
  search.seenSince.set('e@2', 1)
  search.enterKey('leftovers')
  assert.equal(search.groupKey, 'leftovers')
  assert.equal(search.homeKey, 'key')
  assert.deepEqual([search.tried.size, search.heard.size, search.turnedAway, search.grouped.size, search.noRoom.size, search.cameFor.size, search.seenLooking.size, search.visibleSince, search.aloneSeconds], [0, 0, 0, 0, 0, 0, 0, null, 0])
  assert.deepEqual([search.followers.size, search.silent.get('d'), search.seenSince.get('e@2')], [1, 9, 1])
})

test('a refusal saying a group filled without us is counted, and the members a full group lists are kept (bounded, never ourselves)', async () => {
  const ids = await Promise.all(Array.from({ length: 10 }, async () => peerIdFromPrivateKey(await generateKeyPair('Ed25519')).toString()))
  const search = new Search(ids[0], 'key', info(1), 1000)
  const full = (members: string[]): MessageFromLeader => leaderMessage(MatchCode.GROUP_IS_FULL, 'group is full', { orderedPeerIds: members.map(id => peerIdToBytes(id) as Uint8Array<ArrayBuffer>) })
  search.noteRefusal(full([ids[1], ids[2], ids[0], ids[3]]), 50, 4)
  assert.equal(search.turnedAway, 1)
  assert.deepEqual([...search.grouped.keys()], [ids[1], ids[2], ids[3]], 'the listed members but ourselves')
  assert.equal(search.grouped.get(ids[1]), 50)
  // More than a group's worth in one refusal: only the first targetGroupSize are read.
  search.noteRefusal(full(ids.slice(4, 10)), 51, 4)
  assert.deepEqual([...search.grouped.keys()].slice(3), ids.slice(4, 8))
  // A refusal that lists nothing (agents before it) counts as before; a garbled id is skipped; other codes list nothing.
  search.noteRefusal({ ...full([]), orderedPeerIds: [new TextEncoder().encode('not-a-peer-id')] }, 52, 4)
  search.noteRefusal(leaderMessage(MatchCode.NOT_A_LEADER, 'leader follows another peer', { orderedPeerIds: [peerIdToBytes(ids[9]) as Uint8Array<ArrayBuffer>] }), 53, 4)
  assert.equal(search.turnedAway, 3)
  assert.equal(search.grouped.size, 7)
  assert.equal(search.grouped.has(ids[9]), false)
})

test('a peer refusing us as full, or refused by us so, is noted as one our group cannot take this key (bounded); other refusals are not', () => {
  const search = new Search('self', 'key', info(1), 1000)
  search.noteRefusal(leaderMessage(MatchCode.GROUP_IS_FULL, 'no room for the asker and the 2 follower(s) it leads'), 50, 4, 'full-leader')
  search.noteRefusal(leaderMessage(MatchCode.NOT_A_LEADER, 'leader follows another peer'), 50, 4, 'busy-leader')
  search.noteRefusal(leaderMessage(MatchCode.BAD_EXPIRATION_TIME, 'leader expires after the follower'), 50, 4, 'later-leader')
  search.noteRefusal(leaderMessage(MatchCode.GROUP_IS_FULL, 'group is full'), 50, 4)
  search.noteNoRoom('big-asker', 4)
  assert.deepEqual([...search.noRoom], ['full-leader', 'big-asker'])
  for (let i = 0; i < 40; i++) search.noteNoRoom(`p${i}`, 4)
  assert.equal(search.noRoom.size, 16, 'a few full groups\' worth, whatever the wire says')
})

// A follower that confirms (JoinRequest.confirms) holds its place from our ACCEPTED but is a member only
// once its JoinConfirm comes: one whose own group assembled while our ACCEPTED was on its way never
// confirms, and counted at once it was listed in a group it never ran in (the 256-peer test in CI).

test('a follower that has not confirmed holds its place but completes no group: a full group assembles once it confirms', async () => {
  const { search, received } = leaderWith(['f1'])
  const pending = { peerId: 'f2', info: info(3), settle: (m: MessageFromLeader) => { received.set('f2', [...(received.get('f2') ?? []), m]) }, confirmed: false }
  search.followers.set('f2', pending)
  assert.equal(search.unconfirmed, 1)
  assert.equal(search.assembleIfFull(3), false, 'full only once it confirms')
  assert.equal(search.confirmFollower('f2', pending), true)
  assert.equal(search.assembleIfFull(3), true)
  const group = await settled(search)
  assert.ok(group !== 'pending')
  assert.deepEqual([...group.peerIds].sort(), ['f1', 'f2', 'leader'])
  assert.equal(search.confirmFollower('f2', pending), false, 'nothing to confirm after the group assembled')
})

test('an expiration waits for a follower\'s confirmation: one that confirms is in the group, one dropped leaves the others to assemble', async () => {
  for (const confirms of [true, false]) {
    const { search, received } = leaderWith(['f1'])
    const pending = { peerId: 'f2', info: info(3), settle: (m: MessageFromLeader) => { received.set('f2', [...(received.get('f2') ?? []), m]) }, confirmed: false }
    search.followers.set('f2', pending)
    assert.equal(search.expire(100, 2), null, 'the search loop neither assembles nor disbands while a confirmation is out')
    assert.equal(search.assembleIfEnough(2), null)
    assert.equal(search.waitingForAnswers, true)
    if (confirms) assert.equal(search.confirmFollower('f2', pending), true)
    else search.dropFollower('f2', pending)
    assert.equal(search.waitingForAnswers, false)
    const group = search.recheckExpiry(2)
    assert.ok(group != null, 'the expiration that waited assembles')
    assert.deepEqual([...group.peerIds].sort(), confirms ? ['f1', 'f2', 'leader'] : ['f1', 'leader'])
    assert.equal(received.get('f2') == null, !confirms, 'a dropped follower is sent nothing (it left)')
  }
})

test('assembled despite a confirmation still out, the group lists only confirmed followers and tells the other it formed without it', async () => {
  const { search, received } = leaderWith(['f1'])
  const pending = { peerId: 'f2', info: info(3), settle: (m: MessageFromLeader) => { received.set('f2', [...(received.get('f2') ?? []), m]) }, confirmed: false }
  search.followers.set('f2', pending)
  assert.equal(search.assembleIfEnough(2), null)
  const group = search.assembleDespiteAsk(2)
  assert.ok(group != null)
  assert.deepEqual([...group.peerIds].sort(), ['f1', 'leader'])
  assert.equal(received.get('f1')![0].code, MatchCode.BEGIN_ALLREDUCE)
  assert.equal(received.get('f2')![0].code, MatchCode.GROUP_IS_FULL)
  assert.equal(search.confirmFollower('f2', pending), false, 'its confirmation, when it comes, is too late')

  // Only unconfirmed followers: too few to assemble despite them; the expiration waits on.
  const alone = leaderWith([])
  alone.search.followers.set('f3', { peerId: 'f3', info: info(4), settle: () => {}, confirmed: false })
  assert.equal(alone.search.assembleIfEnough(2), null)
  assert.equal(alone.search.assembleDespiteAsk(2), null)
  assert.equal(alone.search.waitingForAnswers, true)
})
