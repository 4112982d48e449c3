import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startSwarm, fill, weightedMean, maxAbsDiff, DATA_CHANNELS, type DataChannelCase } from './swarm-fixture.js'
import type { NamedTensor } from '../../agent/averager.js'
import type { KernelBackend } from '../../agent/kernels/reduce-kernels.js'

const SHAPES: Array<[string, number[]]> = [['w1', [1000, 1003]], ['b1', [1003]], ['scalar', [1]], ['w2', [517, 13]]]

function tensorsFor (peer: number): NamedTensor[] {
  return SHAPES.map(([name, shape], t) => ({ name, shape, data: fill(shape.reduce((a, b) => a * b, 1), peer * 10 + t) }))
}

// Every path with the default (WebAssembly SIMD) kernels, and the direct path with the JavaScript ones.
const CASES: Array<{ path: DataChannelCase, kernels: KernelBackend }> = [
  ...DATA_CHANNELS.map(path => ({ path, kernels: 'wasm-simd' as const })),
  { path: DATA_CHANNELS[0], kernels: 'js' }
]

for (const { path, kernels } of CASES) {
  test(`8 peers, parts over ${path.name}, ${kernels} kernels: one step leaves every peer with the exact mean of all tensors`, { timeout: 120_000 }, async () => {
    const n = 8
    const swarm = await startSwarm(n, { tensors: tensorsFor, config: () => ({ targetGroupSize: 8, minGroupSize: 8, ...path.config, kernels }) })
    try {
      const originals = swarm.averagers.map((_, p) => tensorsFor(p))
      const total = originals[0].reduce((sum, t) => sum + t.data.length, 0)
      assert.ok(total >= 1_000_000, 'at least 1M elements in all')
      const results = await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 60 })))
      const groupIds = new Set(results.map(r => r.groupId))
      assert.equal(groupIds.size, 1, 'all peers formed one group')
      for (const r of results) {
        assert.equal(r.peers.length, n)
        assert.deepEqual(r.allreduce.failedReducers, [], 'no reducer failed')
        assert.deepEqual(r.allreduce.bannedSenders, [], 'no sender was left out')
        assert.equal(r.allreduce.partsKeptLocal, 0)
      }
      for (const a of swarm.averagers) {
        assert.equal(a.kernelBackend, kernels)
        assert.equal(a.dataChannel.threads, path.config.dataThreads ?? 0, 'the data channel ran on the threads asked for')
        assert.equal(a.dataChannel.opened[path.channel], n - 1, `every part went over ${path.name}`)
        assert.equal(a.dataChannel.opened[path.channel === 'direct' ? 'libp2p' : 'direct'], 0, 'no channel took the other path')
      }
      for (let t = 0; t < SHAPES.length; t++) {
        const expected = weightedMean(originals.map(o => o[t].data), originals.map(() => 1))
        for (let p = 0; p < n; p++) {
          const got = await swarm.averagers[p].withTensors(ts => ts[t].data)
          const err = maxAbsDiff(got, expected)
          assert.ok(err < 1e-4, `peer ${p} tensor ${SHAPES[t][0]}: max error ${err}`)
        }
      }
    } finally {
      await swarm.stop()
    }
  })
}

// float16 parts and means are encoded into lent memory that goes back for reuse once the channel
// has written them (wire-memory.ts): memory given back while a socket still read it would put
// another part's bytes on the wire. Values here are integers below 1024 whose means (k + 1.5, then
// k + 3) float16 holds exactly, so every peer must hold the exact mean, bit for bit, two rounds running.
for (const path of DATA_CHANNELS) {
  test(`4 peers, float16 parts over ${path.name}: two rounds of exact means through reused wire memory`, { timeout: 120_000 }, async () => {
    const n = 4
    const elements = 300_001 // ten parts of 32768 float16 values a span and change, at the default part size
    const round = (r: number, p: number): Float32Array => Float32Array.from({ length: elements }, (_, i) => ((i * (2 * r + 1)) % 1000) + (r + 1) * p)
    const swarm = await startSwarm(n, {
      tensors: (p) => [{ name: 'w', shape: [elements], data: round(0, p) }],
      config: () => ({ targetGroupSize: n, minGroupSize: n, compression: 'float16', ...path.config })
    })
    try {
      for (let r = 0; r < 2; r++) {
        if (r > 0) await Promise.all(swarm.averagers.map(async (a, p) => { await a.withTensors(ts => { ts[0].data.set(round(r, p)) }) }))
        const results = await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 60 })))
        for (const res of results) {
          assert.equal(res.peers.length, n)
          assert.equal(res.allreduce.partsKeptLocal, 0)
        }
        const expected = weightedMean(swarm.averagers.map((_, p) => round(r, p)), swarm.averagers.map(() => 1))
        for (let p = 0; p < n; p++) {
          const got = await swarm.averagers[p].withTensors(ts => ts[0].data.slice())
          assert.equal(maxAbsDiff(got, expected), 0, `round ${r + 1}, peer ${p}: the exact mean`)
        }
      }
      for (const a of swarm.averagers) assert.equal(a.dataChannel.opened[path.channel === 'direct' ? 'libp2p' : 'direct'], 0, `every part went over ${path.name}`)
    } finally {
      await swarm.stop()
    }
  })
}
