import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startSwarm, maxAbsDiff } from './swarm-fixture.js'
import type { DecentralizedAverager, StepOptions, StepResult } from '../../agent/averager.js'
import { applyOuterStep } from '../../agent/outer/outer-step.js'

// DiLoCo's outer step in the agent (agent/outer/outer-step.ts). Each peer registers Δ, θ and m. The
// values are multiples of 1/64 near 1 (θ) and below 1 (Δ, m), lr and μ are powers of two: every mean,
// and every step, is exact in float32, so the tests compare bit for bit. The pseudo-gradients here are
// multiples of 1/64 below 0.25 that float16 holds exactly, as it does their means over four peers.
const ELEMENTS = 50_003
const OUTER = { params: ['theta'], buffers: ['m'], lr: 0.5, momentum: 0.5, nesterov: true }
const STEP: StepOptions = { names: ['delta'], outer: OUTER, timeout: 60 }

function pseudoGradient (round: number, peer: number): Float32Array {
  return Float32Array.from({ length: ELEMENTS }, (_, i) => (((i * (round + 3) + peer * 5) % 17) - 8) / 64)
}

async function state (a: DecentralizedAverager): Promise<{ theta: Float32Array, m: Float32Array, delta: Float32Array }> {
  return await a.withTensors(ts => ({ delta: ts[0].data.slice(), theta: ts[1].data.slice(), m: ts[2].data.slice() }))
}

/** Writes each peer's Δ for this round (the trainer's copy-in); returns them. */
async function trainAll (averagers: readonly DecentralizedAverager[], round: number): Promise<Float32Array[]> {
  return await Promise.all(averagers.map(async (a, p) => await a.withTensors(ts => { const d = pseudoGradient(round, p); ts[0].data.set(d); return d })))
}

function mean (arrays: readonly Float32Array[]): Float32Array {
  return Float32Array.from({ length: arrays[0].length }, (_, i) => arrays.reduce((s, a) => s + a[i], 0) / arrays.length)
}

/** θ, m stepped with Δ: what the agent must hold after a step. */
function stepped (theta: Float32Array, m: Float32Array, delta: Float32Array): { theta: Float32Array, m: Float32Array } {
  const t = theta.slice(); const b = m.slice()
  applyOuterStep(t, b, delta, OUTER.lr, OUTER.momentum, OUTER.nesterov)
  return { theta: t, m: b }
}

async function startDiLoCoSwarm (n: number, compression: 'none' | 'float16'): ReturnType<typeof startSwarm> {
  return await startSwarm(n, {
    tensors: (p) => [
      { name: 'delta', shape: [ELEMENTS], data: new Float32Array(ELEMENTS) },
      // Members start apart: the first round must average θ' and m'.
      { name: 'theta', shape: [ELEMENTS], data: Float32Array.from({ length: ELEMENTS }, (_, i) => 1 + ((i * 7 + p * 3) % 11) / 64) },
      { name: 'm', shape: [ELEMENTS], data: new Float32Array(ELEMENTS) }
    ],
    config: () => ({ targetGroupSize: n, minGroupSize: n, compression })
  })
}

for (const compression of ['none', 'float16'] as const) {
  test(`4 peers, ${compression}: the first outer round averages θ' and m', then the pseudo-gradients alone, each exact`, { timeout: 120_000 }, async () => {
    const n = 4
    const swarm = await startDiLoCoSwarm(n, compression)
    try {
      const before = await Promise.all(swarm.averagers.map(state))
      const sent = await trainAll(swarm.averagers, 1)
      const first: StepResult[] = await Promise.all(swarm.averagers.map(async a => await a.step(STEP)))
      assert.ok(first.every(r => r.outer === 'parameters' && r.peers.length === n && r.allreduce.partsKeptLocal === 0), 'no shared state yet: θ\' and m\' travel')
      const own = before.map((s, p) => stepped(s.theta, s.m, sent[p]))
      const expected = { theta: mean(own.map(o => o.theta)), m: mean(own.map(o => o.m)) }
      for (const [p, a] of swarm.averagers.entries()) {
        const got = await state(a)
        assert.equal(maxAbsDiff(got.theta, expected.theta), 0, `peer ${p}: θ is the mean of the members' θ'`)
        assert.equal(maxAbsDiff(got.m, expected.m), 0, `peer ${p}: m is the mean of the members' m'`)
      }
      let shared = expected
      for (let round = 2; round <= 3; round++) {
        const gradients = await trainAll(swarm.averagers, round)
        const results = await Promise.all(swarm.averagers.map(async a => await a.step(STEP)))
        for (const r of results) {
          assert.equal(r.outer, 'pseudo-gradients', `round ${round}: one θ, m in the group, Δ alone travels`)
          assert.equal(r.codec, compression)
          assert.equal(r.delta, false)
          assert.equal(r.allreduce.partsKeptLocal, 0)
        }
        // Δ is half of what the first round moved (θ' and m'); the members' spans differ, their sum does not.
        const bytes = (rs: readonly StepResult[]): number => rs.reduce((s, r) => s + r.allreduce.bytesSent, 0)
        assert.ok(bytes(results) < 0.55 * bytes(first), `round ${round} sent ${bytes(results)} bytes against ${bytes(first)}`)
        shared = stepped(shared.theta, shared.m, mean(gradients))
        for (const [p, a] of swarm.averagers.entries()) {
          const got = await state(a)
          assert.equal(maxAbsDiff(got.delta, mean(gradients)), 0, `round ${round}, peer ${p}: Δ holds the mean pseudo-gradient`)
          assert.equal(maxAbsDiff(got.theta, shared.theta), 0, `round ${round}, peer ${p}: θ stepped with the mean, bit for bit`)
          assert.equal(maxAbsDiff(got.m, shared.m), 0, `round ${round}, peer ${p}: m too`)
        }
      }
      // A member's θ replaced (its trainer's own state): the group averages θ' and m' again. Under float16 it
      // sends their changes since the first round's result, the base every member still holds.
      await swarm.averagers[0].withTensors(ts => { ts[1].data[0] += 1 / 64 })
      swarm.averagers[0].tensorsReplaced()
      const before4 = await Promise.all(swarm.averagers.map(state))
      const sent4 = await trainAll(swarm.averagers, 4)
      const fourth = await Promise.all(swarm.averagers.map(async a => await a.step(STEP)))
      assert.ok(fourth.every(r => r.outer === 'parameters' && r.delta === (compression === 'float16')), JSON.stringify(fourth.map(r => [r.outer, r.delta])))
      const own4 = before4.map((s, p) => stepped(s.theta, s.m, sent4[p]))
      const got4 = await Promise.all(swarm.averagers.map(state))
      // Changes below 1 carried as float16: within its half-ulp of them (values near 1 would be off by up to 2^-11).
      assert.ok(maxAbsDiff(got4[0].theta, mean(own4.map(o => o.theta))) <= 2 ** -13, 'θ is the mean of θ\'')
      for (const g of got4.slice(1)) assert.equal(maxAbsDiff(g.theta, got4[0].theta), 0, 'one θ on every member')
    } finally {
      await swarm.stop()
    }
  })
}

test('a member whose θ was replaced makes its group average θ\' and m\'; a step alone steps with its own Δ', { timeout: 120_000 }, async () => {
  const n = 3
  const swarm = await startDiLoCoSwarm(n, 'none')
  const [a, b, c] = swarm.averagers
  try {
    await trainAll(swarm.averagers, 1)
    assert.ok((await Promise.all(swarm.averagers.map(async x => await x.step(STEP)))).every(r => r.outer === 'parameters'))
    await trainAll(swarm.averagers, 2)
    assert.ok((await Promise.all(swarm.averagers.map(async x => await x.step(STEP)))).every(r => r.outer === 'pseudo-gradients'))
    // c's trainer writes θ (a restored checkpoint, POST /v1/state): its state is its own now.
    await c.withTensors(ts => { ts[1].data[0] += 1 })
    c.tensorsReplaced()
    const before = await Promise.all(swarm.averagers.map(state))
    const sent = await trainAll(swarm.averagers, 3)
    const mixed = await Promise.all(swarm.averagers.map(async x => await x.step(STEP)))
    assert.ok(mixed.every(r => r.outer === 'parameters'), 'one member holds another θ: θ\' and m\' travel')
    const own = before.map((s, p) => stepped(s.theta, s.m, sent[p]))
    assert.equal(maxAbsDiff((await state(a)).theta, mean(own.map(o => o.theta))), 0, 'and θ is their exact mean')
    // Alone (the others do not step): no group, and θ, m are stepped with our own Δ.
    const alone = await state(a)
    const d = (await trainAll([a], 4))[0]
    await assert.rejects(a.step({ ...STEP, timeout: 3 }), /group/)
    const got = await state(a)
    const expected = stepped(alone.theta, alone.m, d)
    assert.equal(maxAbsDiff(got.theta, expected.theta), 0, 'a step alone steps θ with its own Δ')
    assert.equal(maxAbsDiff(got.m, expected.m), 0, 'and m')
    // A copy-in refused (the caller's ready rejects): nothing is stepped.
    const refused = Promise.reject(new Error('a NaN in the region'))
    refused.catch(() => {})
    await assert.rejects(a.step({ ...STEP, timeout: 3, ready: refused }))
    assert.equal(maxAbsDiff((await state(a)).theta, got.theta), 0, 'a refused copy-in steps nothing')
    void b
  } finally {
    await swarm.stop()
  }
})
