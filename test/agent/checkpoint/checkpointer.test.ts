import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Checkpointer, stateHolders, type Snapshot } from '../../../agent/checkpoint/checkpointer.js'
import { listCheckpoints, loadNewestCheckpoint } from '../../../agent/checkpoint/index.js'
import { AgentMetrics } from '../../../agent/metrics/agent-metrics.js'

const GiB = 2 ** 30
const values = (seed: number): Float32Array => Float32Array.from({ length: 1000 }, (_, i) => seed + i / 1000)

async function withDir (fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'ckpter-'))
  try { await fn(dir) } finally { await rm(dir, { recursive: true, force: true }) }
}

/** A snapshot over `live` that records which way the checkpointer took it. */
function snapshotOf (live: Float32Array, bytes: number, taken: string[]): Snapshot {
  return {
    bytes,
    copy: () => { taken.push('copy'); return [{ name: 'w', dtype: 'float32', shape: [live.length], data: live.slice() }] },
    hold: async (write) => { taken.push('hold'); await write([{ name: 'w', dtype: 'float32', shape: [live.length], data: live }]) }
  }
}

const quiet = { info: () => {}, warn: () => {} }

test('only interval rounds are written, by the smallest state-holding peer id of the group', async () => {
  await withDir(async dir => {
    const metrics = new AgentMetrics('t')
    const cp = new Checkpointer({ store: { kind: 'folder', dir }, every: 2, keep: 5 }, 'sw', metrics, quiet)
    const peers = stateHolders({ peers: ['c', 'a', 'b'], auxiliary: ['a'] })
    assert.deepEqual(peers, ['c', 'b'], 'auxiliary peers keep no state and never write')
    const taken: string[] = []
    for (const [round, self] of [[1, 'b'], [2, 'c'], [2, 'b'], [3, 'b'], [4, 'b']] as const) {
      await cp.afterRound({ round, peers, self, samples: round }, snapshotOf(values(round), 4000, taken))
      await cp.drain()
    }
    assert.deepEqual((await listCheckpoints(dir, 'sw')).map(c => c.round), [4, 2])
    assert.equal(cp.durableRound, 4)
    assert.deepEqual(taken, ['copy', 'copy'], 'a copy fits, so the writes ran from copies')
    assert.match(await metrics.registry.metrics(), /averaging_checkpoint_writes_total\{outcome="written",swarm="t"\} 2/)
  })
})

test('a copy that does not fit beside the agent is not taken: the write holds the live tensors instead', async () => {
  await withDir(async dir => {
    const lines: string[] = []
    const cp = new Checkpointer({ store: { kind: 'folder', dir }, every: 1, keep: 5 }, 'sw', new AgentMetrics('t'), { info: () => {}, warn: l => lines.push(l) }, 8 * GiB, () => 6 * GiB)
    const taken: string[] = []
    const live = values(7)
    await cp.afterRound({ round: 1, peers: ['a'], self: 'a', samples: 1 }, snapshotOf(live, 2 * GiB, taken))
    await cp.afterRound({ round: 2, peers: ['a'], self: 'a', samples: 2 }, snapshotOf(live, 2 * GiB, taken))
    assert.deepEqual(taken, ['hold', 'hold'])
    assert.equal(lines.filter(l => /written in place/.test(l)).length, 1, 'said once, not every round')
    const { checkpoint } = await loadNewestCheckpoint(dir, 'sw', undefined, { log: () => {} })
    assert.deepEqual(checkpoint?.tensors.get('w'), live)
  })
})

test('a round that ends while the previous checkpoint is still being written is skipped, and said so', async () => {
  await withDir(async dir => {
    const lines: string[] = []
    const cp = new Checkpointer({ store: { kind: 'folder', dir }, every: 1, keep: 5 }, 'sw', new AgentMetrics('t'), { info: () => {}, warn: l => lines.push(l) })
    let release!: () => void
    const gate = new Promise<void>(resolve => { release = resolve })
    const slow: Snapshot = { bytes: 4000, copy: async () => { await gate; return [{ name: 'w', dtype: 'float32', shape: [1000], data: values(1) }] } }
    const first = cp.afterRound({ round: 1, peers: ['a'], self: 'a', samples: 1 }, slow)
    // Round 1's checkpoint is under way (its copy is still being taken) when round 2 ends.
    await cp.afterRound({ round: 2, peers: ['a'], self: 'a', samples: 2 }, snapshotOf(values(2), 4000, []))
    release()
    await first
    await cp.drain()
    assert.ok(lines.some(l => /not checkpointing round 2: the previous checkpoint is still being written/.test(l)), lines.join('\n'))
    assert.deepEqual((await listCheckpoints(dir, 'sw')).map(c => c.round), [1])
  })
})

test('at completion a member that does not write waits for the writer\'s manifest, and writes itself if it never comes', async () => {
  await withDir(async dir => {
    const writer = new Checkpointer({ store: { kind: 'folder', dir }, every: 10, keep: 5 }, 'sw', new AgentMetrics('t'), quiet)
    const member = new Checkpointer({ store: { kind: 'folder', dir }, every: 10, keep: 5 }, 'sw', new AgentMetrics('t'), quiet)
    const round = { round: 3, peers: ['a', 'b'], samples: 3 }
    const memberTaken: string[] = []
    const waiting = member.final({ ...round, self: 'b' }, snapshotOf(values(3), 4000, memberTaken), 10_000)
    assert.equal(await writer.final({ ...round, self: 'a' }, snapshotOf(values(3), 4000, []), 10_000), true)
    assert.equal(await waiting, true)
    assert.deepEqual(memberTaken, [], 'the member saw the writer\'s checkpoint and wrote nothing')
    assert.equal(member.durableRound, 3)
    // With no writer at all, the member writes the final round itself after the wait.
    const alone = new Checkpointer({ store: { kind: 'folder', dir }, every: 10, keep: 5 }, 'other', new AgentMetrics('t'), quiet)
    const taken: string[] = []
    assert.equal(await alone.final({ ...round, self: 'b' }, snapshotOf(values(4), 4000, taken), 600), true)
    assert.deepEqual(taken, ['copy'])
    assert.equal((await loadNewestCheckpoint(dir, 'other', undefined, { log: () => {} })).checkpoint?.manifest.round, 3)
  })
})

test('at completion a writer whose tensors moved after the round (a step that did not average) leaves the round to a member that still holds its result', async () => {
  await withDir(async dir => {
    const lines: string[] = []
    const policy = { store: { kind: 'folder' as const, dir }, every: 10, keep: 5 }
    const writer = new Checkpointer(policy, 'sw', new AgentMetrics('t'), { info: () => {}, warn: l => lines.push(l) })
    const member = new Checkpointer(policy, 'sw', new AgentMetrics('t'), quiet)
    // 'a' leads round 3 by its peer id, but its trainer's last step found no group and moved its tensors (values 9).
    const round = { round: 3, peers: ['a', 'b'], samples: 3 }
    const writerTaken: string[] = []
    const moved = writer.final({ ...round, self: 'a', movedSince: true }, snapshotOf(values(9), 4000, writerTaken), 10_000)
    assert.equal(await member.final({ ...round, self: 'b' }, snapshotOf(values(3), 4000, []), 300), true)
    assert.equal(await moved, true)
    assert.deepEqual(writerTaken, [], 'the writer whose tensors moved wrote nothing')
    const { checkpoint } = await loadNewestCheckpoint(dir, 'sw', undefined, { log: () => {} })
    assert.equal(checkpoint?.manifest.round, 3)
    assert.deepEqual(checkpoint.tensors.get('w'), values(3), 'round 3 holds the round\'s result, not the moved tensors')
    // Alone (nobody else holds the round), it writes after the wait and says what the checkpoint holds.
    const alone = new Checkpointer(policy, 'other', new AgentMetrics('t'), { info: () => {}, warn: l => lines.push(l) })
    assert.equal(await alone.final({ ...round, self: 'a', movedSince: true }, snapshotOf(values(9), 4000, []), 300), true)
    assert.ok(lines.some(l => /round 3 did not appear within 0 s; writing it here, from tensors that moved after that round/.test(l)), lines.join('\n'))
  })
})

test('checkpoint.interval: a round is also written once the interval passed since the newest checkpoint, counting other groups\' writes', async () => {
  await withDir(async dir => {
    // Near the real time: manifests carry the real time of their write, which the checkpointers read back.
    let clock = Date.now()
    const now = (): number => clock
    const policy = { store: { kind: 'folder' as const, dir }, every: 1000, keep: 10, intervalMs: 60_000 }
    const a = new Checkpointer(policy, 'sw', new AgentMetrics('t'), quiet, 8 * GiB, () => 0, now)
    const b = new Checkpointer(policy, 'sw', new AgentMetrics('t'), quiet, 8 * GiB, () => 0, now)
    const taken: string[] = []
    const round = async (cp: Checkpointer, r: number, self: string): Promise<void> => {
      await cp.afterRound({ round: r, peers: [self, 'z'], self, samples: r }, snapshotOf(values(r), 4000, taken))
      await cp.drain()
    }
    await round(a, 1, 'a')
    clock += 59_000
    await round(a, 2, 'a')
    assert.deepEqual((await listCheckpoints(dir, 'sw')).map(c => c.round), [], 'not before the interval (counted from the start)')
    clock += 2_000
    await round(a, 3, 'a')
    assert.deepEqual((await listCheckpoints(dir, 'sw')).map(c => c.round), [3], 'written once it passed')
    clock += 30_000
    await round(a, 4, 'a')
    // b, the writer of another group, has seen no write yet (its own clock says 91 s since its start), but the store knows round 3.
    await round(b, 4, 'b')
    assert.deepEqual((await listCheckpoints(dir, 'sw')).map(c => c.round), [3], 'nobody writes within the interval of the newest checkpoint')
    clock += 31_000
    await round(b, 5, 'b')
    assert.deepEqual((await listCheckpoints(dir, 'sw')).map(c => c.round), [5, 3])
    assert.equal(b.durableRound, 5)
  })
})
