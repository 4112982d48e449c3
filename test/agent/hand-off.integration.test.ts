import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startSwarm, fill, weightedMean, DATA_CHANNELS } from './swarm-fixture.js'
import { makePlan } from '../../agent/allreduce/plan.js'
import { codecFor } from '../../agent/compression/index.js'
import { PeerMode } from '../../agent/proto/averaging.js'
import type { AveragerConfig, NamedTensor, StepResult } from '../../agent/averager.js'

// A preemption notice shorter than the round: the leaving member stops its span where it is, tells
// every sender where (after the means before it), and the three left average the rest of its span
// among themselves. Killed there instead, it would leave that rest local to each member, who then
// disagree on it (a reducer that answered in part cannot be repaired without knowing where it stopped).

// A span of 1024 parts: a burst of parts already in a socket is reduced in one go, and the notice must still come mid-span.
const ELEMENTS = 1 << 22
const PART_BYTES = 4096
const tensorsFor = (seed: number): NamedTensor[] => [{ name: 'w', shape: [ELEMENTS], data: fill(ELEMENTS, seed) }]
const CONFIG: Partial<AveragerConfig> = { targetGroupSize: 4, minGroupSize: 4, allreduceTimeout: 30, requestTimeout: 2, averagingExpiration: 8, partSizeBytes: PART_BYTES }

for (const path of DATA_CHANNELS) {
  test(`parts over ${path.name}: a member that must leave mid-round hands the rest of its span off; the others average it among themselves, no deadline waited, nothing kept local`, { timeout: 120_000 }, async () => {
    const swarm = await startSwarm(4, { tensors: tensorsFor, config: () => ({ ...CONFIG, ...path.config }) })
    const leaver = swarm.averagers[3]
    const leaverId = swarm.nodes[3].peerId.toString()
    try {
      const stepping = Promise.all(swarm.averagers.slice(0, 3).map(async a => await a.step({ timeout: 60 })))
      const leaving = leaver.step({ timeout: 60 }).then((r: StepResult) => r, (err: Error) => err)
      // The notice runs out once the leaver has reduced a few parts of its span, far from its end.
      let progress
      for (;;) {
        progress = leaver.spanProgress
        if (progress !== undefined && progress.reduced >= 2) break
        await new Promise(resolve => setImmediate(resolve))
      }
      leaver.leaveBy(Date.now())
      const results = await stepping
      await leaving
      assert.ok(progress.reduced < progress.span / 2, `the notice came mid-span (${progress.reduced} of ${progress.span} parts reduced)`)

      const r0 = results[0]
      assert.equal(r0.peers.length, 4)
      assert.ok(r0.peers.includes(leaverId))
      const handedAt = r0.allreduce.handedOffReducers[leaverId]
      const infos = r0.peers.map(() => ({ mode: PeerMode.NODE, weight: 1, userData: new Uint8Array(0), dataPort: 0, addrs: [], dataAddrs: [], round: 0 }))
      const plan = makePlan(infos, [ELEMENTS], PART_BYTES, codecFor('none'))
      const l = r0.peers.indexOf(leaverId)
      const span = plan.spanEnd[l] - plan.spanStart[l]
      assert.ok(handedAt >= progress.reduced && handedAt < span, `handed off after ${handedAt} of its ${span} parts`)
      for (const r of results) {
        assert.equal(r.groupId, r0.groupId)
        assert.deepEqual(r.allreduce.failedReducers, [leaverId])
        assert.deepEqual(r.allreduce.handedOffReducers, { [leaverId]: handedAt }, 'every sender was told the same part')
        assert.equal(r.allreduce.repairedParts, span - handedAt, 'the rest of its span was averaged by the others')
        assert.equal(r.allreduce.partsKeptLocal, 0)
        assert.ok(r.allreduce.bannedSenders.every(p => p === leaverId), `only the leaver left out as a sender: ${r.allreduce.bannedSenders.join(', ')}`)
        assert.deepEqual(r.allreduce.cutOffSenders, { adaptive: [], fixed: [] }, 'no sender waited out')
        assert.deepEqual(r.allreduce.cutOffReducers, { adaptive: [], fixed: [] }, 'no reducer waited out')
      }

      const all = weightedMean([0, 1, 2, 3].map(p => tensorsFor(p)[0].data), [1, 1, 1, 1])
      const left = weightedMean([0, 1, 2].map(p => tensorsFor(p)[0].data), [1, 1, 1])
      const got = await Promise.all(swarm.averagers.slice(0, 3).map(async a => await a.withTensors(ts => ts[0].data.slice())))
      const counts = { all: 0, left: 0 }
      for (const [k, part] of plan.parts.entries()) {
        const leaversRest = k >= plan.spanStart[l] + handedAt && k < plan.spanEnd[l]
        const leaversFirst = k >= plan.spanStart[l] && k < plan.spanStart[l] + handedAt
        // The whole part is the mean of all four (the leaver had sent it) or of the three left.
        const near = (mean: Float64Array): boolean => { for (let i = part.offset; i < part.offset + part.length; i++) if (Math.abs(got[0][i] - mean[i]) > 1e-4) return false; return true }
        const of = near(all) ? 'all' : near(left) ? 'left' : 'neither'
        assert.notEqual(of, 'neither', `part ${k} holds neither mean`)
        if (leaversRest) assert.equal(of, 'left', `part ${k}, of the leaver's span after it stopped: the three's mean`)
        if (leaversFirst) assert.equal(of, 'all', `part ${k}, of the leaver's span before it stopped: everyone's mean`)
        counts[of as 'all' | 'left']++
        for (let i = part.offset; i < part.offset + part.length; i++) {
          if (got[1][i] !== got[0][i] || got[2][i] !== got[0][i]) assert.fail(`the members left disagree at element ${i} (part ${k}): ${got[0][i]}, ${got[1][i]}, ${got[2][i]}`)
        }
      }
      assert.ok(counts.left >= span - handedAt)
    } finally {
      await swarm.stop()
    }
  })
}
