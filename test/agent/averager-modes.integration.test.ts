import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { startSwarm, fill, weightedMean, maxAbsDiff, DATA_CHANNELS, type DataChannelCase } from './swarm-fixture.js'
import type { NamedTensor, AveragerConfig } from '../../agent/averager.js'

const N = 4
const tensorsFor = (peer: number): NamedTensor[] => [
  { name: 'w', shape: [300, 301], data: fill(300 * 301, peer) },
  { name: 'b', shape: [7], data: fill(7, 100 + peer) }
]
const groupOver = (path: DataChannelCase, config: (i: number) => Partial<AveragerConfig> = () => ({})) => async (t: { signal: AbortSignal }) =>
  await startSwarm(N, { tensors: tensorsFor, config: i => ({ targetGroupSize: N, minGroupSize: N, partSizeBytes: 16384, ...path.config, ...config(i) }) })

async function tensorsOf (swarm: Awaited<ReturnType<ReturnType<typeof groupOver>>>, peer: number): Promise<Float32Array[]> {
  return await swarm.averagers[peer].withTensors(ts => ts.map(t => t.data.slice()))
}

for (const path of DATA_CHANNELS) describe(`parts over ${path.name}`, () => {
  const group = (config: (i: number) => Partial<AveragerConfig> = () => ({})) => groupOver(path, config)

  test('weights: each peer ends at the weighted mean', { timeout: 90_000 }, async (t) => {
    const swarm = await group()(t)
    try {
      const weights = [1, 2, 3, 0.5]
      await Promise.all(swarm.averagers.map(async (a, i) => await a.step({ weight: weights[i], timeout: 40 })))
      for (let k = 0; k < 2; k++) {
        const expected = weightedMean(swarm.averagers.map((_, p) => tensorsFor(p)[k].data), weights)
        for (let p = 0; p < N; p++) assert.ok(maxAbsDiff((await tensorsOf(swarm, p))[k], expected) < 1e-4, `peer ${p}`)
      }
    } finally { await swarm.stop() }
  })

  test('averagingAlpha 0.5: each peer moves half way to the mean', { timeout: 90_000 }, async (t) => {
    const swarm = await group(() => ({ averagingAlpha: 0.5 }))(t)
    try {
      await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 40 })))
      for (let k = 0; k < 2; k++) {
        const originals = swarm.averagers.map((_, p) => tensorsFor(p)[k].data)
        const mean = weightedMean(originals, originals.map(() => 1))
        for (let p = 0; p < N; p++) {
          const expected = originals[p].map((x, i) => x + 0.5 * (mean[i] - x))
          assert.ok(maxAbsDiff((await tensorsOf(swarm, p))[k], expected) < 1e-4, `peer ${p}`)
        }
      }
    } finally { await swarm.stop() }
  })

  test('client mode: a client sends and receives the mean but reduces nothing', { timeout: 90_000 }, async (t) => {
    const swarm = await group(i => ({ mode: i === 3 ? 'client' : 'node' }))(t)
    try {
      const results = await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 40 })))
      const expected = weightedMean(swarm.averagers.map((_, p) => tensorsFor(p)[0].data), [1, 1, 1, 1])
      for (let p = 0; p < N; p++) assert.ok(maxAbsDiff((await tensorsOf(swarm, p))[0], expected) < 1e-4, `peer ${p}`)
      // A client reduces no span: every byte it receives is a mean it asked for, none is a part to reduce.
      assert.equal(results[3].allreduce.partsReduced, 0, 'the client reduced no span')
      assert.equal(results.reduce((n, r) => n + r.allreduce.partsReduced, 0), results[0].allreduce.partsTotal, 'the three others reduced every part')
      for (const r of results) assert.equal(r.allreduce.partsKeptLocal, 0)
      assert.notEqual(results[0].peers.findIndex(p => p === swarm.nodes[3].peerId.toString()), -1, 'the client is in the group')
    } finally { await swarm.stop() }
  })

  test('a client that becomes reachable finishes its round as a client and reduces a span from the next', { timeout: 90_000 }, async (t) => {
    const swarm = await group(i => ({ mode: i === 3 ? 'client' : 'node' }))(t)
    try {
      const client = swarm.averagers[3]
      const first = swarm.averagers.map(async a => await a.step({ timeout: 40 }))
      // Asked while its round runs (the step holds the averager's step lock from the call on).
      const becoming = client.becomeReachable('node')
      const during = await Promise.all(first)
      assert.equal(during[3].allreduce.partsReduced, 0, 'the round under way ended as a client\'s')
      assert.equal(await becoming, true, 'it took the mode')
      assert.equal(client.config.mode, 'node')
      assert.equal(await client.becomeReachable('node'), false, 'a second call changes nothing')
      if (path.channel === 'direct') assert.ok(client.dataChannel.port > 0, 'its data channel listens')
      const next = await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 40 })))
      assert.ok(next[3].allreduce.partsReduced > 0, 'the former client reduced a span')
      assert.equal(next.reduce((n, r) => n + r.allreduce.partsReduced, 0), next[0].allreduce.partsTotal, 'every part was reduced once')
      for (const r of next) assert.equal(r.allreduce.partsKeptLocal, 0)
      const expected = weightedMean(swarm.averagers.map((_, p) => tensorsFor(p)[0].data), [1, 1, 1, 1])
      for (let p = 0; p < N; p++) assert.ok(maxAbsDiff((await tensorsOf(swarm, p))[0], expected) < 1e-4, `peer ${p}`)
    } finally { await swarm.stop() }
  })

  test('auxiliary mode: an auxiliary peer reduces for others, contributes nothing, keeps its tensors', { timeout: 90_000 }, async (t) => {
    const swarm = await group(i => ({ mode: i === 3 ? 'auxiliary' : 'node' }))(t)
    try {
      const results = await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 40 })))
      for (let k = 0; k < 2; k++) {
        const expected = weightedMean([0, 1, 2].map(p => tensorsFor(p)[k].data), [1, 1, 1])
        for (let p = 0; p < 3; p++) assert.ok(maxAbsDiff((await tensorsOf(swarm, p))[k], expected) < 1e-4, `peer ${p}`)
        assert.equal(maxAbsDiff((await tensorsOf(swarm, 3))[k], tensorsFor(3)[k].data), 0, 'auxiliary tensors untouched')
      }
      assert.ok(results[3].allreduce.partsReduced > 0, 'the auxiliary peer reduced a span')
      assert.equal(results[3].allreduce.partsTotal, 0, 'the auxiliary peer averages nothing of its own')
    } finally { await swarm.stop() }
  })

  test('gather: every member receives every member\'s gathered data', { timeout: 90_000 }, async (t) => {
    const swarm = await group()(t)
    try {
      const results = await Promise.all(swarm.averagers.map(async (a, i) => await a.step({ gather: { rank: i, batch: 32 * (i + 1) }, timeout: 40 })))
      for (const r of results) {
        assert.equal(r.gathered.size, N)
        for (let i = 0; i < N; i++) {
          assert.deepEqual(r.gathered.get(swarm.nodes[i].peerId.toString()), { rank: i, batch: 32 * (i + 1) })
        }
      }
    } finally { await swarm.stop() }
  })

  test('total weight zero is an error, never NaN', { timeout: 90_000 }, async (t) => {
    const swarm = await group()(t)
    try {
      const outcomes = await Promise.allSettled(swarm.averagers.map(async a => await a.step({ weight: 0, timeout: 40 })))
      for (const o of outcomes) {
        assert.equal(o.status, 'rejected')
        assert.match(String((o as PromiseRejectedResult).reason.message), /total weight of the group is zero/)
      }
      for (let p = 0; p < N; p++) assert.equal(maxAbsDiff((await tensorsOf(swarm, p))[0], tensorsFor(p)[0].data), 0)
    } finally { await swarm.stop() }
  })

  test('compression auto: the group tries none, then float16, and every member uses the same codec each round', { timeout: 120_000 }, async (t) => {
    const swarm = await group(() => ({ compression: 'auto' }))(t)
    try {
      const codecs: string[][] = []
      for (let round = 0; round < 3; round++) {
        const results = await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 40 })))
        codecs.push(results.map(r => r.codec))
        for (const r of results) assert.equal(r.allreduce.partsKeptLocal, 0)
      }
      for (const round of codecs) assert.equal(new Set(round).size, 1, `one codec per round: ${JSON.stringify(codecs)}`)
      assert.deepEqual(codecs.slice(0, 2).map(r => r[0]), ['none', 'float16'], 'each codec measured once first')
      assert.ok(['none', 'float16'].includes(codecs[2][0]))
      // The first round is exact (none); float16 and the mean of means stay within float16's error.
      const expected = weightedMean(swarm.averagers.map((_, p) => tensorsFor(p)[0].data), [1, 1, 1, 1])
      for (let p = 0; p < N; p++) assert.ok(maxAbsDiff((await tensorsOf(swarm, p))[0], expected) < 0.01, `peer ${p}`)
    } finally { await swarm.stop() }
  })

  for (const [compression, tolerance, ratio] of [['float16', 0.01, 0.55], ['uniform8bit', 0.12, 0.32], ['blockwise8bit', 0.12, 0.32]] as const) {
    test(`compression ${compression}: every peer lands near the mean with fewer bytes on the wire`, { timeout: 90_000 }, async (t) => {
      const swarm = await group(() => ({ compression }))(t)
      try {
        const results = await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 40 })))
        const originals = swarm.averagers.map((_, p) => tensorsFor(p)[0].data)
        const expected = weightedMean(originals, originals.map(() => 1))
        for (let p = 0; p < N; p++) {
          const got = (await tensorsOf(swarm, p))[0]
          let sq = 0
          for (let i = 0; i < got.length; i++) sq += (got[i] - expected[i]) ** 2
          const rmse = Math.sqrt(sq / got.length)
          assert.ok(rmse < tolerance, `peer ${p}: RMSE ${rmse} against the exact mean`)
        }
        // Uncompressed, a peer sends its parts to 3 reducers and the means of its span back: 2·S·(N-1)/N floats.
        const uncompressed = 2 * 4 * (originals[0].length + 7) * (N - 1) / N
        for (const r of results) assert.ok(r.allreduce.bytesSent < ratio * uncompressed, `${r.allreduce.bytesSent} bytes sent, ${(r.allreduce.bytesSent / uncompressed).toFixed(3)} of uncompressed`)
      } finally { await swarm.stop() }
    })
  }
})
