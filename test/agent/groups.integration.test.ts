import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startSwarm, fill, maxAbsDiff } from './swarm-fixture.js'
import { MatchmakingError } from '../../agent/errors.js'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { GridLayout } from '../../agent/moshpit/grid-layout.js'

const small = (peer: number) => [{ name: 'x', shape: [2000], data: fill(2000, peer) }]

test('16 peers with targetGroupSize 4 form groups of at most 4, nobody in two groups', { timeout: 120_000 }, async () => {
  const swarm = await startSwarm(16, { tensors: small, config: () => ({ targetGroupSize: 4, minGroupSize: 2, requestTimeout: 3, averagingExpiration: 6 }) })
  try {
    const outcomes = await Promise.allSettled(swarm.averagers.map(async a => await a.step({ timeout: 60 })))
    // A leader whose declaration runs out assembles below target (minGroupSize 2), as hivemind's
    // does: 4+4+4+3 leaves one peer that nobody can take in this round, and its step fails
    // cleanly (seen in a clean-clone CI run on a loaded machine). Two or more left over can
    // still pair, so at most one may fail, and only so.
    const failed = outcomes.flatMap((o, i) => o.status === 'rejected' ? [{ i, reason: o.reason as unknown }] : [])
    for (const f of failed) assert.ok(f.reason instanceof MatchmakingError, `peer ${f.i} failed otherwise: ${String(f.reason)}`)
    assert.ok(failed.length <= 1, `${failed.length} peers found no group; two or more could have paired`)
    const results = outcomes.flatMap((o, i) => o.status === 'fulfilled' ? [{ i, r: o.value }] : [])
    const members = new Map<string, Set<string>>()
    for (const { i, r } of results) {
      assert.ok(r.peers.length >= 2 && r.peers.length <= 4, `group of ${r.peers.length}`)
      const set = members.get(r.groupId) ?? new Set()
      set.add(swarm.nodes[i].peerId.toString())
      members.set(r.groupId, set)
    }
    const ids = swarm.nodes.map(n => n.peerId.toString())
    for (const [groupId, set] of members) {
      const claimed = results.find(({ r }) => r.groupId === groupId)!.r.peers
      // Each member listed but absent: the group it ran in, or its step's error.
      const absent = claimed.filter(p => !set.has(p)).map(p => {
        const i = ids.indexOf(p)
        const o = outcomes[i]
        return o.status === 'fulfilled' ? `${i} ran in group ${o.value.groupId.slice(0, 8)} of ${o.value.peers.length}` : `${i} failed: ${String(o.reason)}`
      })
      assert.deepEqual([...set].sort(), [...claimed].sort(), `every listed member ran in that group, and only there (${absent.join('; ')})`)
    }
    if (failed.length === 1) {
      const sizes = [...members.values()].map(s => s.size)
      assert.ok(sizes.some(n => n < 4), `a peer was left over although every group filled (${sizes.join('+')})`)
    }
    const seen = new Set<string>()
    for (const { r } of results) for (const p of r.peers) if (r.groupId === [...members.keys()].find(g => members.get(g)!.has(p))) seen.add(p)
    assert.equal(seen.size, 16 - failed.length, 'each peer that averaged is in exactly one group')
  } finally { await swarm.stop() }
})

test('a group below minGroupSize fails cleanly, and a retry with enough peers succeeds', { timeout: 120_000 }, async () => {
  const swarm = await startSwarm(4, { tensors: small, config: () => ({ targetGroupSize: 4, minGroupSize: 4 }) })
  try {
    const three = await Promise.allSettled(swarm.averagers.slice(0, 3).map(async a => await a.step({ timeout: 5, allowRetries: false })))
    for (const o of three) {
      assert.equal(o.status, 'rejected')
      assert.ok((o as PromiseRejectedResult).reason instanceof MatchmakingError)
      assert.match((o as PromiseRejectedResult).reason.message, /could not find a group/)
    }
    for (let p = 0; p < 3; p++) assert.equal(maxAbsDiff(await swarm.averagers[p].withTensors(t => t[0].data), small(p)[0].data), 0, 'a failed step changes nothing')
    const all = await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 30 })))
    for (const r of all) assert.equal(r.peers.length, 4)
  } finally { await swarm.stop() }
})

// The grid either from bits each peer is given, or as an operator-run swarm lays it out: empty
// bits, and the membership files the operator mounts (16 members, 1 bootstrap agent), each peer
// ranked by its pod name.
const membersDir = mkdtempSync(join(tmpdir(), 'avs-members-'))
writeFileSync(join(membersDir, 'members'), '16')
writeFileSync(join(membersDir, 'bootstrap'), '1')
const podName = (i: number): string => i === 0 ? 'grid-bootstrap-0-0' : `grid-agent-${i - 1}`
const layouts = [
  { name: 'bits given to each peer', bits: (i: number) => (i % 4).toString(2).padStart(2, '0'), hooks: undefined },
  { name: 'bits laid out from the membership the operator mounts', bits: () => '', hooks: (i: number) => ({ gridBits: () => new GridLayout(membersDir, podName(i), 4).bits() }) }
]

for (const layout of layouts) test(`16 peers on a 4x4 Moshpit grid reach the global mean in 2 rounds (${layout.name})`, { timeout: 180_000 }, async () => {
  const swarm = await startSwarm(16, { tensors: small, config: i => ({ targetGroupSize: 4, minGroupSize: 4, initialGroupBits: layout.bits(i), requestTimeout: 3, averagingExpiration: 6 }), hooks: layout.hooks })
  try {
    const originals = swarm.averagers.map((_, p) => small(p)[0].data)
    const mean = new Float64Array(2000)
    for (const o of originals) for (let i = 0; i < mean.length; i++) mean[i] += o[i] / 16
    const deviation = async (): Promise<number> => {
      let worst = 0
      for (const a of swarm.averagers) worst = Math.max(worst, maxAbsDiff(await a.withTensors(t => t[0].data), mean))
      return worst
    }
    const before = await deviation()
    const round1 = await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 60 })))
    for (const r of round1) assert.equal(r.peers.length, 4)
    // Round 1's groups are the grid's rows: peers of one rank modulo 4.
    for (const [i, r] of round1.entries()) {
      const rows = r.peers.map(p => swarm.nodes.findIndex(n => n.peerId.toString() === p) % 4)
      assert.deepEqual(new Set(rows), new Set([i % 4]), `peer ${i} grouped with its row (ranks modulo 4: ${rows.join(', ')})`)
    }
    const after1 = await deviation()
    const round2 = await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 60 })))
    for (const r of round2) assert.equal(r.peers.length, 4)
    const after2 = await deviation()
    // Which of the three failed says why: a round that averaged only partly, groups that did not
    // mix, or arithmetic.
    for (const [round, results] of [[1, round1], [2, round2]] as const) {
      for (const r of results) {
        assert.equal(r.allreduce.partsKeptLocal, 0, `round ${round}: a peer kept parts local (failed reducers ${r.allreduce.failedReducers.join(', ') || 'none'}, banned senders ${r.allreduce.bannedSenders.join(', ') || 'none'})`)
      }
    }
    assert.ok(after1 < before && after1 > 1e-3, `round 1 averages within rows only (${before} -> ${after1})`)
    const firstGroups = new Map(round1.map((r, i) => [i, r.groupId]))
    for (const r of round2) {
      const ids = r.peers.map(p => swarm.nodes.findIndex(n => n.peerId.toString() === p))
      assert.equal(new Set(ids.map(i => firstGroups.get(i))).size, 4, `round-2 groups mix members of four round-1 groups (peers ${ids.join(', ')})`)
    }
    assert.ok(after2 < 1e-5, `after 2 rounds every peer holds the global mean (max deviation ${after2})`)
  } finally { await swarm.stop() }
})
