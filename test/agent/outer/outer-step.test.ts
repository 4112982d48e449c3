import { test } from 'node:test'
import assert from 'node:assert/strict'
import { OuterStates, applyOuterStep, planOuterStep, type OuterStep } from '../../../agent/outer/outer-step.js'

const schema = [
  { name: 'delta/w', shape: [2, 3] }, { name: 'outer/w', shape: [2, 3] }, { name: 'momentum/w', shape: [2, 3] },
  { name: 'delta/b', shape: [3] }, { name: 'outer/b', shape: [3] }, { name: 'momentum/b', shape: [3] }
]
const outer: OuterStep = { params: ['outer/w', 'outer/b'], buffers: ['momentum/w', 'momentum/b'], lr: 0.7, momentum: 0.9, nesterov: true }

test('an outer step names its tensors pairwise, in registered order', () => {
  const plan = planOuterStep(schema, ['delta/w', 'delta/b'], outer)
  assert.deepEqual([plan.gradients, plan.params, plan.buffers], [[0, 3], [1, 4], [2, 5]])
})

test('a malformed outer step is refused with one sentence naming what is wrong', () => {
  const cases: Array<[readonly string[] | undefined, Partial<OuterStep>, RegExp]> = [
    [undefined, {}, /needs names/],
    [['delta/w', 'delta/b'], { lr: Number.NaN }, /outer\.lr must be a finite number >= 0/],
    [['delta/w', 'delta/b'], { momentum: -1 }, /outer\.momentum must be a finite number >= 0/],
    [['delta/w', 'delta/b'], { params: ['outer/w'] }, /outer\.params must list 2 registered tensors/],
    [['delta/w', 'delta/b'], { buffers: ['momentum/w', 'nope'] }, /outer\.buffers holds "nope", which is not a registered tensor/],
    [['delta/w', 'delta/b'], { params: ['outer/b', 'outer/w'] }, /outer\.params\[0\] "outer\/b" has shape \[3\], but names\[0\] "delta\/w" has \[2, 3\]/],
    [['delta/w', 'delta/b'], { buffers: ['outer/w', 'outer/b'] }, /tensor "outer\/w" is named twice/],
    [['delta/w', 'delta/x'], {}, /not a registered tensor/]
  ]
  for (const [names, change, message] of cases) {
    assert.throws(() => planOuterStep(schema, names, { ...outer, ...change }), message)
  }
  const all = schema.map(t => t.name)
  assert.throws(() => planOuterStep(schema, all, { ...outer }), /cannot cover every registered tensor/)
})

test('the step is float32 arithmetic with one rounding per operation, as numpy float32 takes it', () => {
  const n = 1000
  const theta = Float32Array.from({ length: n }, (_, i) => Math.sin(i) * 3)
  const m = Float32Array.from({ length: n }, (_, i) => Math.cos(i) / 7)
  const g = Float32Array.from({ length: n }, (_, i) => Math.sin(i * 1.3) / 11)
  for (const nesterov of [true, false]) {
    const t = theta.slice(); const b = m.slice()
    applyOuterStep(t, b, g, 0.7, 0.9, nesterov)
    // The reference: each operation on float32 arrays, as numpy does it (m *= mu; m += g; ...).
    const mu = new Float32Array([0.9])[0]; const lr = new Float32Array([0.7])[0]
    const m1 = new Float32Array(n); const u = new Float32Array(n); const t1 = new Float32Array(n)
    for (let i = 0; i < n; i++) { m1[i] = m[i] * mu; m1[i] = m1[i] + g[i] }
    for (let i = 0; i < n; i++) {
      if (nesterov) { u[i] = m1[i] * mu; u[i] = u[i] + g[i] } else u[i] = m1[i]
      u[i] = u[i] * lr
      t1[i] = theta[i] - u[i]
    }
    assert.deepEqual(b, m1, `m (nesterov ${nesterov})`)
    assert.deepEqual(t, t1, `θ (nesterov ${nesterov})`)
  }
})

test('members declare one state only for the same group and the same hyperparameters', () => {
  const plan = planOuterStep(schema, ['delta/w', 'delta/b'], outer)
  const a = new OuterStates(schema.length); const b = new OuterStates(schema.length)
  assert.equal(a.declared(plan).byteLength, 0, 'nothing shared yet')
  const group = new Uint8Array(20).fill(7)
  a.landed(plan, group); b.landed(plan, group)
  assert.deepEqual(a.declared(plan), b.declared(plan))
  assert.equal(a.declared(plan).byteLength, 32)
  assert.notDeepEqual(a.declared({ ...plan, lr: 0.5 }), b.declared(plan), 'another lr steps differently')
  assert.notDeepEqual(a.declared({ ...plan, nesterov: false }), b.declared(plan))
  b.forget([4])
  assert.equal(b.declared(plan).byteLength, 0, 'one tensor replaced: no shared state')
})

test('a donor\'s states travel with its state download; anything malformed is adopted as no state', () => {
  const plan = planOuterStep(schema, ['delta/w', 'delta/b'], outer)
  const donor = new OuterStates(schema.length)
  donor.landed(plan, new Uint8Array(20).fill(3))
  const snapshot = JSON.parse(JSON.stringify(donor.snapshot())) as unknown
  const newcomer = new OuterStates(schema.length)
  assert.equal(newcomer.adopt(snapshot), true)
  assert.deepEqual(newcomer.declared(plan), donor.declared(plan), 'the newcomer declares its donor\'s state')
  for (const bad of [null, 'x', { ids: ['zz'], of: [0, -1, 0, -1, 0, 0] }, { ids: ['03'], of: [0, 1, 0, 0, 0, 0] },
    { ids: ['03'], of: [0, 0] }, { ids: ['aa'.repeat(33)], of: [0, 0, 0, 0, 0, 0] }, { ids: [], of: [0.5, -1, -1, -1, -1, -1] }]) {
    const c = new OuterStates(schema.length)
    c.landed(plan, new Uint8Array(20).fill(3))
    assert.equal(c.adopt(bad), false, JSON.stringify(bad))
    assert.equal(c.declared(plan).byteLength, 0, 'a malformed snapshot leaves no state')
  }
})
