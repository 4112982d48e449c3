import { test } from 'node:test'
import assert from 'node:assert/strict'
import { PeerMode, type PeerInfo } from '../../../agent/proto/averaging.js'
import { makePlan } from '../../../agent/allreduce/plan.js'
import { planRepair, repairGroupId, withRepair } from '../../../agent/allreduce/repair.js'
import { codecFor } from '../../../agent/compression/index.js'
import type { AllReduceResult } from '../../../agent/allreduce/runner.js'
import type { GroupInfo } from '../../../agent/matchmaking/group-info.js'

// Which repair a round calls for, and how its result folds in: pure, no network.

const info = (mode = PeerMode.NODE): PeerInfo => ({ mode, weight: 1, userData: new Uint8Array(0), dataPort: 0, addrs: [], dataAddrs: [], round: 0 })
const ids = ['a', 'b', 'c', 'd']
const groupOf = (modes: PeerMode[], myIndex: number): GroupInfo => ({ groupId: new Uint8Array(20).fill(7), peerIds: ids.slice(0, modes.length), infos: modes.map(m => info(m)), myIndex, leader: 'a' })
// Two tensors of 40 and 24 elements in parts of 8 elements (32 bytes): 8 parts, two per member.
const tensors = (): Float32Array[] => [Float32Array.from({ length: 40 }, (_, i) => i), Float32Array.from({ length: 24 }, (_, i) => 100 + i)]
const planFor = (group: GroupInfo) => makePlan(group.infos, [40, 24], 32, codecFor('none'))

function result (over: Partial<AllReduceResult> = {}): AllReduceResult {
  return {
    groupSize: 4, durationMs: 100, bytesSent: 1000, bytesReceived: 900, failedReducers: [], unansweredReducers: [], handedOffReducers: {}, bannedSenders: [],
    cutOffSenders: { adaptive: [], fixed: [] }, cutOffReducers: { adaptive: [], fixed: [] }, partsTotal: 8, partsReduced: 2, partsKeptLocal: 0,
    repairedParts: 0, channels: { direct: 3, libp2p: 0 }, reusedChannels: 0, ...over
  }
}

test('no failed reducer, or one that had answered in part: no repair', () => {
  const group = groupOf([PeerMode.NODE, PeerMode.NODE, PeerMode.NODE, PeerMode.NODE], 0)
  const plan = planFor(group)
  assert.equal(planRepair(group, plan, tensors(), result()), null)
  assert.equal(planRepair(group, plan, tensors(), result({ failedReducers: ['c'], unansweredReducers: [] })), null)
  assert.equal(planRepair(group, plan, tensors(), result({ failedReducers: ['c', 'd'], unansweredReducers: ['d'] })), null)
  assert.equal(planRepair(group, plan, tensors(), result({ failedReducers: ['x'], unansweredReducers: ['x'] })), null, 'not a member')
})

test('a reducer that answered nothing: the others, without it, average its span; our views land in our tensors', () => {
  const group = groupOf([PeerMode.NODE, PeerMode.NODE, PeerMode.NODE, PeerMode.NODE], 1)
  const plan = planFor(group)
  const ours = tensors()
  const repair = planRepair(group, plan, ours, result({ failedReducers: ['c'], unansweredReducers: ['c'] }))
  assert.ok(repair != null)
  assert.deepEqual(repair.group.peerIds, ['a', 'b', 'd'])
  assert.equal(repair.group.myIndex, 1)
  assert.equal(repair.parts, plan.spanEnd[2] - plan.spanStart[2])
  assert.equal(repair.tensors.length, repair.parts)
  // The views are c's parts of our tensors: writing them writes ours.
  const first = plan.parts[plan.spanStart[2]]
  assert.equal(repair.tensors[0][0], ours[first.tensorIndex][first.offset - plan.tensorBases[first.tensorIndex]])
  repair.tensors[0][0] = -1
  assert.equal(ours[first.tensorIndex][first.offset - plan.tensorBases[first.tensorIndex]], -1)
  assert.deepEqual(repair.group.groupId, repairGroupId(group.groupId, [2]))
})

test('a reducer that left mid-span and handed off: the others average the rest of its span, from where it stopped, under an id that says where', () => {
  // Parts of 2 elements (8 bytes): 32 parts, eight per member, so c's span can stop part-way.
  const group = groupOf([PeerMode.NODE, PeerMode.NODE, PeerMode.NODE, PeerMode.NODE], 0)
  const plan = makePlan(group.infos, [40, 24], 8, codecFor('none'))
  const span = plan.spanEnd[2] - plan.spanStart[2]
  assert.ok(span >= 4, `c reduces ${span} parts`)
  const ours = tensors()
  const repair = planRepair(group, plan, ours, result({ failedReducers: ['c'], unansweredReducers: [], handedOffReducers: { c: 3 } }))
  assert.ok(repair != null)
  assert.equal(repair.parts, span - 3)
  const firstLeft = plan.parts[plan.spanStart[2] + 3]
  assert.equal(repair.tensors[0][0], ours[firstLeft.tensorIndex][firstLeft.offset - plan.tensorBases[firstLeft.tensorIndex]], 'the first part it did not answer')
  assert.deepEqual(repair.group.groupId, repairGroupId(group.groupId, [2], new Map([[2, 3]])))
  // Members that saw it stop elsewhere, or answer nothing, meet in another repair; stopping at 0 is answering nothing.
  assert.notDeepEqual(repair.group.groupId, repairGroupId(group.groupId, [2], new Map([[2, 4]])))
  assert.notDeepEqual(repair.group.groupId, repairGroupId(group.groupId, [2]))
  assert.deepEqual(repairGroupId(group.groupId, [2], new Map([[2, 0]])), repairGroupId(group.groupId, [2]))
  // With a second reducer that answered nothing: both spans' rest, in span order.
  const both = planRepair(group, plan, ours, result({ failedReducers: ['d', 'c'], unansweredReducers: ['d'], handedOffReducers: { c: 3 } }))
  assert.equal(both?.parts, span - 3 + plan.spanEnd[3] - plan.spanStart[3])
  assert.deepEqual(both?.group.peerIds, ['a', 'b'])
  // Answered in part without saying where it stopped: nothing to agree on, kept local.
  assert.equal(planRepair(group, plan, ours, result({ failedReducers: ['c'], unansweredReducers: [], handedOffReducers: { d: 2 } })), null)
})

test('the repair\'s group id depends on the round and on who failed, not on the order we saw them fail', () => {
  const g = new Uint8Array(20).fill(7)
  assert.deepEqual(repairGroupId(g, [3, 1]), repairGroupId(g, [1, 3]))
  assert.notDeepEqual(repairGroupId(g, [1]), repairGroupId(g, [1, 3]))
  assert.notDeepEqual(repairGroupId(g, [1]), repairGroupId(new Uint8Array(20).fill(8), [1]))
  assert.notDeepEqual(repairGroupId(g, [1]), g)
  assert.equal(repairGroupId(g, [1]).byteLength, 20)
})

test('auxiliary members hold no tensors and stay out; too few left, or nobody left to reduce: no repair', () => {
  const withAux = groupOf([PeerMode.NODE, PeerMode.NODE, PeerMode.AUXILIARY, PeerMode.NODE], 0)
  const repair = planRepair(withAux, planFor(withAux), tensors(), result({ failedReducers: ['d'], unansweredReducers: ['d'] }))
  assert.deepEqual(repair?.group.peerIds, ['a', 'b'])
  const pair = groupOf([PeerMode.NODE, PeerMode.NODE], 0)
  assert.equal(planRepair(pair, planFor(pair), tensors(), result({ failedReducers: ['b'], unansweredReducers: ['b'] })), null, 'alone')
  const clients = groupOf([PeerMode.CLIENT, PeerMode.CLIENT, PeerMode.NODE], 0)
  assert.equal(planRepair(clients, planFor(clients), tensors(), result({ failedReducers: ['c'], unansweredReducers: ['c'] })), null, 'two clients, no reducer')
})

test('withRepair: repaired parts are no longer kept local; counts, bytes and failures add up', () => {
  const round = result({ failedReducers: ['c'], unansweredReducers: ['c'], bannedSenders: ['c'], partsKeptLocal: 3, cutOffReducers: { adaptive: ['c'], fixed: [] } })
  const repair = result({ durationMs: 40, bytesSent: 200, bytesReceived: 150, partsReduced: 1, partsKeptLocal: 1, failedReducers: ['d'], unansweredReducers: ['d'], channels: { direct: 1, libp2p: 1 } })
  const merged = withRepair(round, repair, 2)
  assert.equal(merged.partsKeptLocal, 3 - 2 + 1)
  assert.equal(merged.repairedParts, 1)
  assert.equal(merged.durationMs, 140)
  assert.equal(merged.bytesSent, 1200)
  assert.equal(merged.partsReduced, 3)
  assert.deepEqual(merged.failedReducers, ['c', 'd'])
  assert.deepEqual(withRepair(result({ handedOffReducers: { c: 2 } }), result({ handedOffReducers: { d: 1 } }), 0).handedOffReducers, { c: 2, d: 1 })
  assert.deepEqual(merged.bannedSenders, ['c'])
  assert.deepEqual(merged.cutOffReducers, { adaptive: ['c'], fixed: [] })
  assert.deepEqual(merged.channels, { direct: 4, libp2p: 1 })
  assert.equal(merged.partsTotal, 8, 'the round\'s vector')
})
