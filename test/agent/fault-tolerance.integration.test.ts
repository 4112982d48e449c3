import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startSwarm, fill, weightedMean, DATA_CHANNELS } from './swarm-fixture.js'
import { makePlan } from '../../agent/allreduce/plan.js'
import { codecFor } from '../../agent/compression/index.js'
import { PeerMode } from '../../agent/proto/averaging.js'
import type { AveragerConfig, NamedTensor } from '../../agent/averager.js'

const SHAPES: Array<[string, number[]]> = [['w', [400, 250]], ['b', [33]]]
const tensorsFor = (seed: number): NamedTensor[] => SHAPES.map(([name, shape], t) => ({ name, shape, data: fill(shape.reduce((a, b) => a * b, 1), seed * 10 + t) }))
const CONFIG: Partial<AveragerConfig> = { targetGroupSize: 5, minGroupSize: 2, allreduceTimeout: 8, requestTimeout: 2, averagingExpiration: 6, partSizeBytes: 16384 }

for (const path of DATA_CHANNELS) {
  test(`parts over ${path.name}: a peer killed mid-round costs only its own contribution: the others finish in time, average its span among themselves after the round (span repair), and the next round succeeds`, { timeout: 150_000 }, async () => {
    // Five peers; the fifth drops off the network (all its connections torn down at once, as a
    // crashed process's kernel would) the moment it learns its group, before it sends or reduces.
    const swarm = await startSwarm(5, {
      tensors: tensorsFor,
      config: () => ({ ...CONFIG, ...path.config }),
      hooks: (i, nodes) => i === 4 ? { onGroup: () => { void nodes[4].stop() } } : {}
    })
    const victim = swarm.averagers[4]
    const victimId = swarm.nodes[4].peerId.toString()
    try {
      const survivors = swarm.averagers.slice(0, 4)
      const stepping = Promise.all(survivors.map(async a => await a.step({ timeout: 60 })))
      // Join last, so the victim follows and never leads.
      await new Promise(resolve => setTimeout(resolve, 1000))
      const victimStep = victim.step({ timeout: 30 }).catch(err => err as Error)
      const results = await stepping
      await victimStep
      const r0 = results[0]
      assert.ok(r0.peers.includes(victimId), 'the victim was in the group when it died')
      for (const r of results) {
        assert.deepEqual(r.allreduce.failedReducers, [victimId])
        assert.deepEqual(r.allreduce.unansweredReducers, [victimId])
        // The round and its repair: each bounded by allreduceTimeout, the repair a fraction of it.
        assert.ok(r.allreduce.durationMs <= CONFIG.allreduceTimeout! * 1000 + 1000, `finished within allreduceTimeout (${r.allreduce.durationMs} ms)`)
      }
      // Recompute the group's plan to know which elements the victim was to reduce.
      const infos = r0.peers.map(() => ({ mode: PeerMode.NODE, weight: 1, userData: new Uint8Array(0), dataPort: 0, addrs: [], dataAddrs: [], round: 0 }))
      const plan = makePlan(infos, SHAPES.map(([, s]) => s.reduce((a, b) => a * b, 1)), CONFIG.partSizeBytes!, codecFor('none'))
      const v = r0.peers.indexOf(victimId)
      const victimParts = new Set<number>()
      for (let k = plan.spanStart[v]; k < plan.spanEnd[v]; k++) victimParts.add(k)
      assert.ok(victimParts.size > 0, 'the victim had a span to reduce')
      for (const r of results) {
        assert.equal(r.allreduce.repairedParts, victimParts.size, 'the victim\'s whole span was repaired')
        assert.equal(r.allreduce.partsKeptLocal, 0)
      }
      for (let t = 0; t < SHAPES.length; t++) {
        const survivorsMean = weightedMean([0, 1, 2, 3].map(p => tensorsFor(p)[t].data), [1, 1, 1, 1])
        for (let p = 0; p < 4; p++) {
          const got = await swarm.averagers[p].withTensors(ts => ts[t].data)
          const original = tensorsFor(p)[t].data
          for (const [k, part] of plan.parts.entries()) {
            if (part.tensorIndex !== t) continue
            const base = part.offset - plan.tensorBases[t]
            for (let i = base; i < base + part.length; i++) {
              assert.ok(Number.isFinite(got[i]), 'no NaN or Inf')
              // Every span, the victim's too, holds the survivors' exact mean.
              if (Math.abs(got[i] - survivorsMean[i]) > 1e-4) assert.fail(`peer ${p} tensor ${t} element ${i} (part ${k}, victim's: ${victimParts.has(k)}): ${got[i]} != ${survivorsMean[i]} (own ${original[i]})`)
            }
          }
        }
      }
      const next = await Promise.all(swarm.averagers.slice(0, 4).map(async a => await a.step({ timeout: 60 })))
      for (const r of next) {
        assert.equal(r.peers.length, 4, 'the next round forms without the dead peer')
        assert.equal(r.allreduce.partsKeptLocal, 0)
      }
    } finally {
      await swarm.stop()
    }
  })
}
