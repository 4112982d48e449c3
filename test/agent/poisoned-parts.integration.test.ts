import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startSwarm, fill, weightedMean, type SwarmFixture } from './swarm-fixture.js'
import { aggregateProtocol } from '../../agent/allreduce/aggregate-protocol.js'
import { TensorPart } from '../../agent/proto/averaging.js'
import type { SwarmNode } from '../../agent/net/node.js'
import { linesLog } from '../../agent/log.js'
import { rewriteOutgoingFrames } from './frame-rewriter.js'

// A dishonest group member: it joins groups like anyone, then sends parts holding NaN,
// +-Inf or the wrong number of bytes. The honest peers must end with the exact mean of the honest
// contributions (or, for a part the hostile delivered intact before it was banned, the mean with
// it), never a NaN, and must ban it with a log line and in the step's result.

const PREFIX = 'poison'
const ELEMENTS = 3 * 4096
/** 1024 float32 values per part: each honest reducer's span holds several parts. */
const PART_BYTES = 4096
const HOSTILE = 3

type Poison = (values: Uint8Array, partOfStream: number) => Uint8Array

/** Rewrites the data of the hostile peer's outgoing TensorParts; the stream's first frame (the header) passes. */
function poisonAggregateStreams (node: SwarmNode, poison: () => Poison | null, counter: { poisoned: number }): void {
  rewriteOutgoingFrames(node, aggregateProtocol(PREFIX), () => (payload, index) => {
    const mutate = poison()
    if (index === 0 || mutate == null) return payload
    const part = TensorPart.decode(payload)
    if (part.data.byteLength === 0) return payload
    const data = mutate(part.data, index - 1)
    if (data !== part.data) counter.poisoned++
    return TensorPart.encode({ ...part, data: data as Uint8Array<ArrayBuffer> })
  })
}

function floats (fillWith: number, bytes: number): Uint8Array {
  return new Uint8Array(new Float32Array(bytes / 4).fill(fillWith).buffer)
}

const CASES: Array<{ name: string, poison: Poison, fromFirstPart: boolean }> = [
  { name: 'NaN parts', poison: (d) => floats(NaN, d.byteLength), fromFirstPart: true },
  { name: '+Inf parts', poison: (d) => floats(Infinity, d.byteLength), fromFirstPart: true },
  { name: '-Inf parts', poison: (d) => floats(-Infinity, d.byteLength), fromFirstPart: true },
  { name: 'parts 4 bytes short', poison: (d) => d.slice(0, d.byteLength - 4), fromFirstPart: true },
  { name: 'parts 4 bytes long', poison: (d) => { const out = new Uint8Array(d.byteLength + 4); out.set(d); return out }, fromFirstPart: true },
  { name: 'parts of a third of the length', poison: (d) => d.slice(0, Math.floor(d.byteLength / 12) * 4), fromFirstPart: true },
  {
    // Honest first part, then one NaN in the second: the first part's mean keeps the hostile's values.
    name: 'one NaN in the second part of each span',
    poison: (d, k) => { if (k !== 1) return d; const out = d.slice(); new DataView(out.buffer).setFloat32(0, NaN, true); return out },
    fromFirstPart: false
  }
]

test('NaN, Inf and wrong-length parts from a group member never reach the means; the sender is banned and logged', { timeout: 300_000 }, async () => {
  const initial = (p: number): Float32Array => fill(ELEMENTS, p)
  const logs: string[][] = [[], [], [], []]
  let current: Poison | null = null
  const counter = { poisoned: 0 }
  const swarm: SwarmFixture = await startSwarm(4, {
    prefix: PREFIX,
    tensors: (p) => [{ name: 'w', shape: [ELEMENTS], data: initial(p) }],
    // The hostile peer is a client: it sends to every reducer and reduces nothing, so every span
    // is reduced by an honest peer and the expected result is exact.
    // The hostile's parts take libp2p streams, where this test rewrites them; the reducers' checks are the same on either path.
    config: (p) => ({ targetGroupSize: 4, minGroupSize: 4, partSizeBytes: PART_BYTES, mode: p === HOSTILE ? 'client' : 'node', ...(p === HOSTILE ? { dataChannel: 'libp2p' as const } : {}) }),
    hooks: (p) => ({ log: linesLog((msg) => { logs[p].push(msg) }) })
  })
  try {
    poisonAggregateStreams(swarm.nodes[HOSTILE], () => current, counter)
    const hostileId = swarm.nodes[HOSTILE].peerId.toString()
    const honest = [0, 1, 2]
    const honestMean = weightedMean(honest.map(initial), [1, 1, 1])
    const allMean = weightedMean([0, 1, 2, 3].map(initial), [1, 1, 1, 1])
    const initialValues = [0, 1, 2, 3].map(initial)
    /** Means over every non-empty subset of the honest peers (plus the hostile's intact parts when allowed). */
    const subsetMeans = (peers: readonly number[], i: number, honestOnly: boolean): number[] => {
      const members = honestOnly ? peers : [...peers, HOSTILE]
      const out: number[] = []
      for (let mask = 1; mask < 1 << members.length; mask++) {
        const chosen = members.filter((_, k) => (mask & (1 << k)) !== 0)
        out.push(chosen.reduce((sum, q) => sum + initialValues[q][i], 0) / chosen.length)
      }
      return out
    }
    for (const c of CASES) {
      // Every round starts from the same values, so the expected means are the same.
      for (let p = 0; p < 4; p++) await swarm.averagers[p].withTensors(t => { t[0].data.set(initial(p)) })
      for (const l of logs) l.length = 0
      current = c.poison
      const poisonedBefore = counter.poisoned
      const results = await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 60 })))
      current = null
      assert.ok(counter.poisoned > poisonedBefore, `${c.name}: the hostile peer's parts were rewritten`)
      assert.ok(results.every(r => r.groupId === results[0].groupId && r.peers.length === 4), `${c.name}: one group of four`)
      // On a loaded machine an honest sender can miss a reducer's timeout too and be left out of
      // that span: then the exact expectation is the mean over the honest peers that made it.
      const clean = honest.every(p => results[p].allreduce.bannedSenders.every(b => b === hostileId) && results[p].allreduce.failedReducers.length === 0)
      for (const p of honest) {
        const values = await swarm.averagers[p].withTensors(t => t[0].data.slice())
        let withHostile = 0
        for (let i = 0; i < ELEMENTS; i++) {
          assert.ok(Number.isFinite(values[i]), `${c.name}: peer ${p} element ${i} is ${values[i]}`)
          if (Math.abs(values[i] - honestMean[i]) < 1e-4) continue
          if (!c.fromFirstPart && Math.abs(values[i] - allMean[i]) < 1e-4) { withHostile++; continue }
          const explained = !clean && subsetMeans(honest, i, c.fromFirstPart).some(m => Math.abs(values[i] - m) < 1e-4)
          assert.ok(explained, `${c.name}: peer ${p} element ${i} is ${values[i]}, not the honest mean ${honestMean[i]}` +
            `${c.fromFirstPart ? '' : ` nor the mean with intact parts ${allMean[i]}`}; logs: ${logs[p].join(' | ')}`)
        }
        if (!c.fromFirstPart && clean) {
          assert.ok(withHostile > 0 && withHostile < ELEMENTS, `${c.name}: peer ${p} kept the hostile's intact first parts (${withHostile} values) and dropped the rest`)
        }
        assert.ok(results[p].allreduce.bannedSenders.includes(hostileId), `${c.name}: peer ${p} reports the hostile peer as banned`)
        assert.ok(logs[p].some(l => l.includes(hostileId) && /leaving sender .* out/.test(l)), `${c.name}: peer ${p} logged the ban: ${logs[p].join(' | ')}`)
      }
    }
  } finally {
    await swarm.stop()
  }
})

// Finite values can still overflow float32: a member declaring weight 1e10 and sending 1e30 makes
// weight * value = 1e40 > float32's 3.4e38. Reducers sum in float64 and never apply or send a mean
// that does not fit float32 (agent/allreduce/span-reducer.ts, reducer-side.ts onPartDone).
for (const dataThreads of [0, 2]) {
  test(`finite but huge weighted parts never leave a non-finite value in any honest peer (direct channel on ${dataThreads > 0 ? `${dataThreads} data threads` : 'the main thread'})`, { timeout: 180_000 }, async () => {
    const swarm = await startSwarm(4, {
      prefix: PREFIX,
      tensors: (p) => [{ name: 'w', shape: [ELEMENTS], data: p === HOSTILE ? new Float32Array(ELEMENTS).fill(1e30) : fill(ELEMENTS, p) }],
      config: (p) => ({ targetGroupSize: 4, minGroupSize: 4, partSizeBytes: PART_BYTES, mode: p === HOSTILE ? 'client' : 'node', dataThreads })
    })
    try {
      await Promise.all(swarm.averagers.map(async (a, p) => await a.step({ timeout: 60, weight: p === HOSTILE ? 1e10 : 1 })))
      for (const p of [0, 1, 2]) {
        const values = await swarm.averagers[p].withTensors(t => t[0].data.slice())
        const bad = values.findIndex(v => !Number.isFinite(v))
        assert.equal(bad, -1, `peer ${p} holds ${values[bad]} at element ${bad}`)
      }
    } finally {
      await swarm.stop()
    }
  })
}
