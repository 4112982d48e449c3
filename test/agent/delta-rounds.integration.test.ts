import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startSwarm, maxAbsDiff, weightedMean, DATA_CHANNELS } from './swarm-fixture.js'
import type { DecentralizedAverager, StepResult } from '../../agent/averager.js'

// Delta rounds (agent/allreduce/delta-base.ts): members that landed a round whole share its result as
// their base, and a lossy codec then carries changes since it. The values here sit near 1000, where
// float16 steps by 0.5, and each round's changes are multiples of 1/64 below 0.25, which float16 holds
// exactly, as it does their means over four peers: carried as values, the mean would be off by up to
// 0.25; carried as changes, it is exact, bit for bit.
const ELEMENTS = 200_003

function change (round: number, peer: number): Float32Array {
  return Float32Array.from({ length: ELEMENTS }, (_, i) => (((i * (round + 3)) % 17) - 8) / 64 + peer / 32)
}

async function tensorsOf (averagers: readonly DecentralizedAverager[]): Promise<Float32Array[]> {
  return await Promise.all(averagers.map(async a => await a.withTensors(ts => ts[0].data.slice())))
}

function assertIdentical (tensors: readonly Float32Array[], what: string): void {
  for (let p = 1; p < tensors.length; p++) assert.equal(maxAbsDiff(tensors[p], tensors[0]), 0, `${what}: peer ${p} holds peer 0's tensors bit for bit`)
}

/** Each peer's values: the group's last result plus this round's change; returns what each sent. */
async function train (averagers: readonly DecentralizedAverager[], round: number): Promise<Float32Array[]> {
  return await Promise.all(averagers.map(async (a, p) => await a.withTensors(ts => {
    const d = change(round, p)
    for (let j = 0; j < d.length; j++) ts[0].data[j] += d[j]
    return ts[0].data.slice()
  })))
}

for (const path of DATA_CHANNELS) {
  test(`4 peers, float16 over ${path.name}: after a whole round the changes travel, and every mean is exact`, { timeout: 120_000 }, async () => {
    const n = 4
    const swarm = await startSwarm(n, {
      tensors: (p) => [{ name: 'w', shape: [ELEMENTS], data: Float32Array.from({ length: ELEMENTS }, (_, i) => 1000 + ((i * 7 + p * 3) % 11) / 8) }],
      config: () => ({ targetGroupSize: n, minGroupSize: n, compression: 'float16', ...path.config })
    })
    try {
      const first = await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 60 })))
      assert.ok(first.every(r => !r.delta && r.allreduce.partsKeptLocal === 0), 'the first round carries values (no base yet)')
      // The reducers take their own spans' means as the others decode them: one result for all.
      assertIdentical(await tensorsOf(swarm.averagers), 'after the first round')
      for (let round = 1; round <= 2; round++) {
        const sent = await train(swarm.averagers, round)
        const results: StepResult[] = await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 60 })))
        for (const r of results) {
          assert.equal(r.peers.length, n)
          assert.equal(r.codec, 'float16')
          assert.equal(r.delta, true, `round ${round + 1} is a delta round`)
          assert.equal(r.allreduce.partsKeptLocal, 0)
        }
        const expected = weightedMean(sent, sent.map(() => 1))
        const got = await tensorsOf(swarm.averagers)
        for (let p = 0; p < n; p++) assert.equal(maxAbsDiff(got[p], expected), 0, `round ${round + 1}, peer ${p}: the exact mean of values float16 cannot hold`)
      }
    } finally {
      await swarm.stop()
    }
  })
}

test('a member whose base differs makes its group send values; the next whole round is a delta round again', { timeout: 120_000 }, async () => {
  const n = 4
  const swarm = await startSwarm(n, {
    tensors: (p) => [{ name: 'w', shape: [ELEMENTS], data: Float32Array.from({ length: ELEMENTS }, (_, i) => 1000 + ((i + p) % 5) / 4) }],
    config: () => ({ targetGroupSize: n, minGroupSize: 2, compression: 'float16' })
  })
  const [a, b, c] = swarm.averagers
  try {
    const all = await Promise.all(swarm.averagers.map(async x => await x.step({ timeout: 60 })))
    assert.ok(all.every(r => r.peers.length === n && !r.delta))
    // Peers a and b average without the others: their base moves on, the others keep the first round's.
    await train([a, b], 1)
    const pair = await Promise.all([a, b].map(async x => await x.step({ timeout: 60 })))
    assert.ok(pair.every(r => r.peers.length === 2 && r.delta), 'the pair shares the first round as its base')
    const sent = await train(swarm.averagers, 2)
    const mixed = await Promise.all(swarm.averagers.map(async x => await x.step({ timeout: 60 })))
    assert.ok(mixed.every(r => r.peers.length === n && !r.delta), 'two bases in one group: values travel')
    const valuesError = maxAbsDiff((await tensorsOf([a]))[0], weightedMean(sent, sent.map(() => 1)))
    assert.ok(valuesError > 0 && valuesError <= 0.25, `float16 values near 1000 are off by up to 0.25 (${valuesError})`)
    assertIdentical(await tensorsOf(swarm.averagers), 'after the values round')
    const again = await train(swarm.averagers, 3)
    const last = await Promise.all(swarm.averagers.map(async x => await x.step({ timeout: 60 })))
    assert.ok(last.every(r => r.peers.length === n && r.delta), 'one base again: a delta round')
    assert.equal(maxAbsDiff((await tensorsOf([c]))[0], weightedMean(again, again.map(() => 1))), 0, 'and its mean is exact')
  } finally {
    await swarm.stop()
  }
})

test('a reducer killed in a delta round: the survivors repair its span with their changes, and every mean is exact', { timeout: 150_000 }, async () => {
  // Five peers; in the second round the fifth drops off the network the moment it learns its group,
  // before it sends or reduces (as in fault-tolerance.integration.test.ts).
  let groups = 0
  const swarm = await startSwarm(5, {
    tensors: (p) => [{ name: 'w', shape: [ELEMENTS], data: Float32Array.from({ length: ELEMENTS }, (_, i) => 1000 + ((i * 7 + p * 3) % 11) / 8) }],
    config: () => ({ targetGroupSize: 5, minGroupSize: 2, allreduceTimeout: 8, requestTimeout: 2, averagingExpiration: 6, partSizeBytes: 16384, compression: 'float16' }),
    hooks: (i, nodes) => i === 4 ? { onGroup: () => { if (++groups === 2) void nodes[4].stop() } } : {}
  })
  const survivors = swarm.averagers.slice(0, 4)
  const victim = swarm.averagers[4]
  try {
    const first = await Promise.all(swarm.averagers.map(async x => await x.step({ timeout: 60 })))
    assert.ok(first.every(r => r.peers.length === 5 && r.allreduce.partsKeptLocal === 0))
    const sent = await train(survivors, 1)
    const expected = weightedMean(sent, sent.map(() => 1))
    // The victim's kept direct channels may still carry its parts after its libp2p node stopped: it
    // sends the survivors' mean, so the exact mean is the same whether or not its parts arrive.
    await victim.withTensors(ts => { ts[0].data.set(expected) })
    const stepping = Promise.all(survivors.map(async x => await x.step({ timeout: 60 })))
    // Join last, so the victim follows and never leads.
    await new Promise(resolve => setTimeout(resolve, 1000))
    const victimStep = victim.step({ timeout: 30 }).catch(err => err as Error)
    const results = await stepping
    await victimStep
    for (const r of results) {
      assert.equal(r.peers.length, 5, 'the victim was in the group when it died')
      assert.equal(r.delta, true)
      assert.ok(r.allreduce.repairedParts > 0, 'its span was repaired')
      assert.equal(r.allreduce.partsKeptLocal, 0)
    }
    const got = await tensorsOf(survivors)
    for (let p = 0; p < 4; p++) assert.equal(maxAbsDiff(got[p], expected), 0, `peer ${p}: the survivors' exact mean, the repaired span too`)
    // The round and its repair landed whole: the survivors share its result as their base.
    const again = await train(survivors, 2)
    const next = await Promise.all(survivors.map(async x => await x.step({ timeout: 60 })))
    assert.ok(next.every(r => r.peers.length === 4 && r.delta), 'the next round is a delta round of the four')
    const after = await tensorsOf(survivors)
    const mean = weightedMean(again, again.map(() => 1))
    for (let p = 0; p < 4; p++) assert.equal(maxAbsDiff(after[p], mean), 0, `peer ${p}: exact again`)
  } finally {
    await swarm.stop()
  }
})
