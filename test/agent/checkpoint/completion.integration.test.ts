import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { startSidecarSwarm } from '../sidecar-fixture.js'
import { SidecarClient } from '../../../clients/typescript/sidecar-client.js'
import { listCheckpoints, loadNewestCheckpoint } from '../../../agent/checkpoint/index.js'

const N = 3
const SPECS = [{ name: 'w', shape: [3000] }, { name: 'b', shape: [7] }]
const values = (peer: number, name: string, n: number): Float32Array => Float32Array.from({ length: n }, (_, i) => Math.sin(peer * 7.3 + i * 0.01 + name.length) * (peer + 1))
const gauge = async (text: string, name: string): Promise<number | undefined> => {
  const line = text.split('\n').find(l => l.startsWith(name + '{') || l.startsWith(name + ' '))
  return line === undefined ? undefined : Number(line.split(' ').at(-1))
}

test('a sidecar swarm with completion after 3 rounds checkpoints every 2, ends complete, and its final checkpoint holds the agents\' state', { timeout: 120_000 }, async () => {
  const dir = await mkdtemp(join(tmpdir(), 'avs-complete-'))
  const swarm = await startSidecarSwarm(N, { targetGroupSize: N, minGroupSize: N }, { checkpoint: { store: { kind: 'folder', dir }, every: 2, keep: 5 }, completionRounds: 3 })
  try {
    const clients = swarm.agents.map(a => new SidecarClient(a.url))
    await Promise.all(clients.map(async c => await c.register(SPECS)))
    let current = clients.map((_, p) => Object.fromEntries(SPECS.map(s => [s.name, values(p, s.name, s.shape[0])])))
    const rounds: number[][] = []
    for (let attempt = 0; attempt < 8 && !rounds.some(r => r.every(x => x >= 3)); attempt++) {
      const results = await Promise.all(clients.map(async (c, p) => await c.step(current[p], { timeout: 20 })))
      if (results.every(r => r.averaged)) {
        // The exact mean of what was sent, before the next round overwrites it.
        for (const s of SPECS) {
          for (let i = 0; i < s.shape[0]; i++) {
            const mean = current.reduce((sum, t) => sum + t[s.name][i], 0) / N
            assert.ok(Math.abs(results[0].tensors[s.name][i] - mean) <= 1e-6 * Math.max(1, Math.abs(mean)), `${s.name}[${i}]`)
          }
        }
      }
      rounds.push(results.map(r => r.round ?? -1))
      current = results.map(r => r.tensors)
      if (results.some(r => r.complete === true)) assert.ok(results.every(r => r.round === 3), `complete only at round 3 (rounds ${JSON.stringify(rounds)})`)
    }
    const last = await Promise.all(clients.map(async c => await c.status()))
    for (const s of last) assert.equal(s.complete, true, `every agent reports completion (rounds ${JSON.stringify(rounds)})`)
    for (const a of swarm.agents) assert.equal(await gauge(await a.metrics.registry.metrics(), 'averaging_completed'), 1)
    // A step after completion averages no more and says so.
    const after = await clients[0].step(current[0], { timeout: 5 })
    assert.equal(after.averaged, false)
    assert.equal(after.complete, true)
    assert.match(after.error ?? '', /run is complete/)
    // The folder holds rounds 2 and 3 (the final one), and round 3 is the agents' last averaged state, bit for bit.
    const listed = await listCheckpoints(dir, 'sidecar-test')
    assert.deepEqual(listed.filter(c => c.manifest).map(c => c.round), [3, 2])
    const { checkpoint } = await loadNewestCheckpoint(dir, 'sidecar-test', SPECS, { log: () => {} })
    assert.equal(checkpoint?.manifest.round, 3)
    for (const s of SPECS) assert.deepEqual(checkpoint.tensors.get(s.name), current[1][s.name], s.name)
    const written = await Promise.all(swarm.agents.map(async a => await gauge(await a.metrics.registry.metrics(), 'averaging_checkpoint_round')))
    assert.deepEqual(written, [3, 3, 3], 'every agent knows round 3 is durable')
  } finally {
    await swarm.stop()
    await rm(dir, { recursive: true, force: true })
  }
})
