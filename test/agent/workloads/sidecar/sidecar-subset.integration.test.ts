import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startSidecarSwarm } from '../../sidecar-fixture.js'
import { SharedRegion, SidecarClient, SidecarError, type StoredValues, type TensorSpec } from '../../../../clients/typescript/sidecar-client.js'
import { count, dyadicValues, narrowOne, widenOne } from './dyadic-values.js'
import { applyOuterStep } from '../../../../agent/outer/outer-step.js'

// Two fragments, as a Streaming DiLoCo trainer registers them: A = outer/a + momentum/a, B = the rest.
const SPECS: TensorSpec[] = [
  { name: 'outer/a', shape: [13, 5] },
  { name: 'outer/b', shape: [7, 3], dtype: 'float16' },
  { name: 'momentum/a', shape: [5], dtype: 'bfloat16' },
  { name: 'momentum/b', shape: [11] }
]
const A = ['momentum/a', 'outer/a'] // any order: the registered one counts
const B = ['outer/b', 'momentum/b']
const values = (agent: number, step: number): Record<string, StoredValues> => dyadicValues(SPECS, agent, step)
const plain = (r: Record<string, StoredValues>): Record<string, number[]> => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, [...v]]))

/** The tensors named averaged (equal weights: exact), the others as `mine` holds them. */
function expected (inputs: Array<Record<string, StoredValues>>, mine: Record<string, StoredValues>, names: readonly string[]): Record<string, number[]> {
  return Object.fromEntries(SPECS.map(t => {
    if (!names.includes(t.name)) return [t.name, [...mine[t.name]]]
    return [t.name, Array.from({ length: count(t) }, (_x, i) => narrowOne(t, inputs.reduce((s, v) => s + widenOne(t, v[t.name][i]), 0) / inputs.length))]
  }))
}

test('a step over a subset of the tensors averages those alone: exact means, the other tensors untouched (region), sent back as they came (binary)', { timeout: 120_000 }, async () => {
  const swarm = await startSidecarSwarm(2, {}, { shm: true })
  try {
    const clients = swarm.agents.map(a => new SidecarClient(a.url))
    const regions = swarm.agents.map(a => SharedRegion.create(a.shmDir ?? '', 'r', SPECS))
    for (const c of clients) await c.register(SPECS, { region: 'r' })
    const inputs = [values(0, 1), values(1, 1)]
    regions.forEach((r, i) => { r.write(inputs[i]) })
    const results = await Promise.all(clients.map(async c => await c.stepRegion({ timeout: 30, names: A })))
    for (const [i, r] of results.entries()) {
      assert.equal(r.averaged, true, `agent ${i}: ${r.error ?? ''}`)
      assert.equal(r.bytesCopied, 2 * (65 * 4 + 5 * 2), 'only subset A was read and written back')
      assert.deepEqual(plain(regions[i].read()), expected(inputs, inputs[i], A), `agent ${i}: A holds the exact mean, B what the trainer wrote`)
      const state = plain((await clients[i].stateBinary(SPECS)).tensors)
      assert.deepEqual(state['outer/a'], expected(inputs, inputs[i], A)['outer/a'], 'the agent holds A\'s mean')
      assert.ok(state['momentum/b'].every(v => v === 0) && state['outer/b'].every(v => v === 0), 'the agent never took B from the trainer')
    }

    // Binary bodies carry every tensor; a step over B averages B, and A comes back as sent.
    const second = [values(0, 2), values(1, 2)]
    const binary = await Promise.all(clients.map(async (c, i) => await c.stepBinary(SPECS, second[i], { timeout: 30, names: B })))
    for (const [i, r] of binary.entries()) {
      assert.equal(r.averaged, true, `agent ${i}: ${r.error ?? ''}`)
      assert.deepEqual(plain(r.tensors), expected(second, second[i], B), `agent ${i}: B is the exact mean, A as sent`)
      const state = plain((await clients[i].stateBinary(SPECS)).tensors)
      assert.deepEqual(state['outer/b'], expected(second, second[i], B)['outer/b'])
      assert.deepEqual(state['outer/a'], expected(inputs, inputs[i], A)['outer/a'], 'A is still the first step\'s mean in the agent')
    }

    // Names covering every tensor (in any order) make an ordinary round: it groups with a peer that names none.
    const third = [values(0, 3), values(1, 3)]
    regions.forEach((r, i) => { r.write(third[i]) })
    const all = await Promise.all([clients[0].stepRegion({ timeout: 30, names: [...B, ...A] }), clients[1].stepRegion({ timeout: 30 })])
    for (const [i, r] of all.entries()) {
      assert.equal(r.averaged, true, `agent ${i}: ${r.error ?? ''}`)
      assert.deepEqual(plain(regions[i].read()), expected(third, third[i], SPECS.map(t => t.name)), `agent ${i}`)
    }
  } finally {
    await swarm.stop()
  }
})

test('peers averaging different subsets (or a subset and all tensors) never group with each other', { timeout: 120_000 }, async () => {
  const swarm = await startSidecarSwarm(2, {}, { shm: true })
  try {
    const clients = swarm.agents.map(a => new SidecarClient(a.url))
    const regions = swarm.agents.map(a => SharedRegion.create(a.shmDir ?? '', 'r', SPECS))
    for (const c of clients) await c.register(SPECS, { region: 'r' })
    const inputs = [values(0, 4), values(1, 4)]
    regions.forEach((r, i) => { r.write(inputs[i]) })
    for (const [what, names] of [['A against B', [A, B]], ['A against all', [A, undefined]]] as const) {
      const results = await Promise.all(clients.map(async (c, i) => await c.stepRegion({ timeout: 4, ...(names[i] !== undefined ? { names: names[i] } : {}) })))
      for (const [i, r] of results.entries()) {
        assert.equal(r.averaged, false, `${what}, agent ${i}: grouped with ${r.peers.join(', ')}`)
        assert.deepEqual(plain(regions[i].read()), plain(inputs[i]), `${what}, agent ${i}: the region holds what the trainer wrote`)
      }
    }
  } finally {
    await swarm.stop()
  }
})

test('empty, unknown, repeated or malformed names are a 400 with one sentence, and nothing is averaged or copied', { timeout: 60_000 }, async () => {
  const swarm = await startSidecarSwarm(2, {}, { shm: true })
  try {
    const agent = swarm.agents[0]
    const client = new SidecarClient(agent.url)
    const region = SharedRegion.create(agent.shmDir ?? '', 'r', SPECS)
    const good = values(5, 5)
    region.write(good)
    await client.register(SPECS, { region: 'r' })
    await client.publishState()
    const before = plain((await client.stateBinary(SPECS)).tensors)
    region.write(values(6, 6))
    const cases: Array<[string, unknown, RegExp]> = [
      ['empty', [], /names must list at least one registered tensor/],
      ['unknown', ['outer/a', 'outer/c'], /names holds "outer\/c", which is not a registered tensor/],
      ['repeated', ['outer/a', 'momentum/a', 'outer/a'], /names holds "outer\/a" twice/],
      ['not an array', 'outer/a', /names must be an array of registered tensor names/],
      ['not strings', [1], /names must be an array of registered tensor names/]
    ]
    for (const [what, names, pattern] of cases) {
      for (const [path, call] of [
        ['region', async () => await client.stepRegion({ timeout: 1, names: names as string[] })],
        ['binary', async () => await client.stepBinary(SPECS, good, { timeout: 1, names: names as string[] })]
      ] as const) {
        await assert.rejects(call(), (err: SidecarError) => {
          assert.equal(err.status, 400, `${what} (${path}): ${err.message}`)
          assert.match(err.message, pattern, `${what} (${path})`)
          assert.ok(!err.message.includes('\n'), 'one sentence')
          return true
        })
      }
    }
    assert.deepEqual(plain((await client.stateBinary(SPECS)).tensors), before, 'no refused step touched the agent\'s tensors')
    assert.deepEqual(plain(region.read()), plain(values(6, 6)), 'nor the region')
    const status = await client.status() as { steps: { averaged: number, failed: number } }
    assert.deepEqual(status.steps, { averaged: 0, failed: 0 }, 'no round ran')
  } finally {
    await swarm.stop()
  }
})

// An outer step (agent/outer/outer-step.ts) through the sidecar: Δ in, θ and m stepped by the agent.
const OUTER_SPECS: TensorSpec[] = [
  { name: 'pseudo_gradient/w', shape: [6, 5] },
  { name: 'outer/w', shape: [6, 5] },
  { name: 'momentum/w', shape: [6, 5] }
]
const OUTER = { params: ['outer/w'], buffers: ['momentum/w'], lr: 0.5, momentum: 0.5, nesterov: true }

test('an outer step takes Δ from the trainer and hands back θ and m as the agent stepped them; a malformed one is a 400', { timeout: 120_000 }, async () => {
  const swarm = await startSidecarSwarm(2, {}, { shm: true })
  try {
    const clients = swarm.agents.map(a => new SidecarClient(a.url))
    for (const c of clients) await c.register(OUTER_SPECS)
    // Both start from one θ (m zero): as a DiLoCo trainer publishes its initial parameters.
    const theta = Float32Array.from({ length: 30 }, (_x, i) => 1 + i / 64)
    const zeros = new Float32Array(30)
    for (const c of clients) await c.publishState(OUTER_SPECS, { 'pseudo_gradient/w': zeros, 'outer/w': theta, 'momentum/w': zeros })
    const delta = (agent: number, step: number): Float32Array => Float32Array.from({ length: 30 }, (_x, i) => ((i * (step + 2) + agent * 3) % 9 - 4) / 64)
    // What a trainer sends for θ and m is ignored: the agent's are stepped.
    const junk = Float32Array.from({ length: 30 }, () => 123)
    let shared = { theta, m: zeros }
    for (let step = 1; step <= 2; step++) {
      const sent = [delta(0, step), delta(1, step)]
      const results = await Promise.all(clients.map(async (c, i) => await c.stepBinary(OUTER_SPECS, { 'pseudo_gradient/w': sent[i], 'outer/w': junk, 'momentum/w': junk }, { timeout: 30, names: ['pseudo_gradient/w'], outer: OUTER })))
      // Published states are the trainers' own: the first round averages θ' and m' (equal here), the second Δ alone.
      const mean = Float32Array.from({ length: 30 }, (_x, i) => (sent[0][i] + sent[1][i]) / 2)
      const own = sent.map(d => { const t = shared.theta.slice(); const m = shared.m.slice(); applyOuterStep(t, m, d, 0.5, 0.5, true); return { t, m } })
      const expectedTheta = step === 1 ? Float32Array.from({ length: 30 }, (_x, i) => (own[0].t[i] + own[1].t[i]) / 2) : (() => { const t = shared.theta.slice(); const m = shared.m.slice(); applyOuterStep(t, m, mean, 0.5, 0.5, true); return t })()
      for (const [i, r] of results.entries()) {
        assert.equal(r.averaged, true, `agent ${i}: ${r.error ?? ''}`)
        assert.equal(r.outer, step === 1 ? 'parameters' : 'pseudo-gradients', `step ${step}`)
        assert.deepEqual([...r.tensors['outer/w']], [...expectedTheta], `step ${step}, agent ${i}: θ as the agent stepped it`)
        assert.deepEqual([...r.tensors['pseudo_gradient/w']], step === 1 ? [...sent[i]] : [...mean], `step ${step}, agent ${i}: Δ`)
      }
      shared = { theta: Float32Array.from(results[0].tensors['outer/w']), m: Float32Array.from(results[0].tensors['momentum/w']) }
    }
    const client = clients[0]
    const before = plain((await client.stateBinary(OUTER_SPECS)).tensors)
    const cases: Array<[string, unknown, RegExp]> = [
      ['no names', { names: undefined, outer: OUTER }, /an outer step needs names/],
      ['shapes', { outer: { ...OUTER, params: ['pseudo_gradient/w'], buffers: ['outer/w'] } }, /is named twice in the outer step/],
      ['unknown', { outer: { ...OUTER, buffers: ['momentum/x'] } }, /outer\.buffers holds "momentum\/x", which is not a registered tensor/],
      ['not an object', { outer: 'sgd' }, /outer must be a JSON object/],
      ['lr', { outer: { ...OUTER, lr: -1 } }, /outer\.lr must be a finite number >= 0/]
    ]
    for (const [what, options, pattern] of cases) {
      await assert.rejects(client.stepBinary(OUTER_SPECS, { 'pseudo_gradient/w': zeros, 'outer/w': junk, 'momentum/w': junk }, { timeout: 1, names: ['pseudo_gradient/w'], ...(options as object) }), (err: SidecarError) => {
        assert.equal(err.status, 400, `${what}: ${err.message}`)
        assert.match(err.message, pattern, what)
        return true
      })
    }
    assert.deepEqual(plain((await client.stateBinary(OUTER_SPECS)).tensors), before, 'no refused step touched the agent\'s tensors')
  } finally {
    await swarm.stop()
  }
})
