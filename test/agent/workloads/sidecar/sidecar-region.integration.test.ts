import { test } from 'node:test'
import assert from 'node:assert/strict'
import { openSync, closeSync, writeSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { startSidecarSwarm } from '../../sidecar-fixture.js'
import { SharedRegion, SidecarClient, SidecarError, frame, regionLayout, type StoredValues, type TensorSpec } from '../../../../clients/typescript/sidecar-client.js'
import { count, dyadicValues, narrowOne, widenOne } from './dyadic-values.js'

// Sizes not divisible by the group size, one of a single element, every storage dtype.
const SPECS: TensorSpec[] = [
  { name: 'one', shape: [1] },
  { name: 'w16', shape: [7, 3], dtype: 'float16' },
  { name: 'wbf', shape: [5], dtype: 'bfloat16' },
  { name: 'w32', shape: [13, 5] }
]
const values = (agent: number, step: number): Record<string, StoredValues> => dyadicValues(SPECS, agent, step)

/** Exact float64 weighted mean (with alpha: local + alpha (mean − local)), rounded to float32, then to the storage dtype. */
function expected (inputs: Array<Record<string, StoredValues>>, weights: number[], self: number, alpha = 1, specs = SPECS): Record<string, number[]> {
  const total = weights.reduce((a, b) => a + b, 0)
  return Object.fromEntries(specs.map(t => {
    const out: number[] = []
    for (let i = 0; i < count(t); i++) {
      const mean = inputs.reduce((s, v, p) => s + weights[p] * widenOne(t, v[t.name][i]), 0) / total
      const local = widenOne(t, inputs[self][t.name][i])
      out.push(narrowOne(t, Math.fround(local + alpha * (mean - local))))
    }
    return [t.name, out]
  }))
}

/**
 * ‖sent − now‖ / ‖sent‖ over every value, in float64: sent the widened inputs, now the agent's float32
 * result (before it is narrowed into the region). The agent sums it as the round's parts land.
 */
function expectedDivergence (inputs: Array<Record<string, StoredValues>>, weights: number[], self: number, alpha = 1): number {
  const total = weights.reduce((a, b) => a + b, 0)
  let diff = 0
  let norm = 0
  for (const t of SPECS) {
    for (let i = 0; i < count(t); i++) {
      const local = widenOne(t, inputs[self][t.name][i])
      const mean = inputs.reduce((s, v, p) => s + weights[p] * widenOne(t, v[t.name][i]), 0) / total
      const now = Math.fround(local + alpha * (mean - local))
      diff += (local - now) ** 2
      norm += local ** 2
    }
  }
  return Math.sqrt(diff / norm)
}

const plain = (r: Record<string, StoredValues>): Record<string, number[]> => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, [...v]]))

test('three agents average through shared-memory regions: exact weighted means in float32, float16 and bfloat16, two steps in a row', { timeout: 120_000 }, async () => {
  const swarm = await startSidecarSwarm(3, {}, { shm: true })
  try {
    const clients = swarm.agents.map(a => new SidecarClient(a.url))
    const regions = swarm.agents.map(a => SharedRegion.create(a.shmDir ?? '', 'trainer.avs', SPECS))
    for (const [i, c] of clients.entries()) assert.deepEqual(await c.register(SPECS, { region: 'trainer.avs' }), { created: true }, `agent ${i}`)
    const status = await clients[0].status() as { region: { bytes: number, offsets: Array<{ offset: number }> }, shmDir: string }
    assert.equal(status.region.bytes, regionLayout(SPECS).bytes, 'agent and client compute the same layout')
    assert.deepEqual(status.region.offsets.map(o => o.offset), regionLayout(SPECS).offsets.map(o => o.offset))
    const weights = [1, 1, 2]
    for (let step = 0; step < 2; step++) {
      const inputs = clients.map((_c, i) => step === 0 ? values(i, step) : { ...regions[i].read(), one: values(i, step).one })
      regions.forEach((r, i) => { r.write(inputs[i]) })
      const results = await Promise.all(clients.map(async (c, i) => await c.stepRegion({ weight: weights[i], timeout: 30 })))
      for (const [i, r] of results.entries()) {
        assert.equal(r.averaged, true, `step ${step} agent ${i}: ${r.error ?? ''}`)
        assert.equal(r.generation, step + 1)
        assert.equal(r.bytesCopied, 2 * SPECS.reduce((n, t) => n + count(t) * (t.dtype === undefined ? 4 : 2), 0), 'read once, written back once')
        assert.ok(typeof r.copyMs === 'number' && r.copyMs >= 0)
        assert.deepEqual(plain(regions[i].read()), expected(inputs, weights, i), `step ${step} agent ${i}: the region holds the exact mean in its dtypes`)
        const divergence = expectedDivergence(inputs, weights, i)
        assert.ok(Math.abs(r.divergence - divergence) <= 1e-12 * divergence, `step ${step} agent ${i}: divergence ${r.divergence}, ${divergence} expected`)
        assert.equal(regions[i].generation, step + 1)
        assert.equal(regions[i].seq % 2, 0)
      }
    }
    const state = await clients[2].stateBinary(SPECS)
    assert.equal(state.origin, 'averaged')
    assert.deepEqual(plain(state.tensors), plain(regions[2].read()), 'binary state is what the region holds')
  } finally {
    await swarm.stop()
  }
})

test('averagingAlpha 0.5 moves each region half way to the mean', { timeout: 60_000 }, async () => {
  const swarm = await startSidecarSwarm(2, { averagingAlpha: 0.5 }, { shm: true })
  try {
    const clients = swarm.agents.map(a => new SidecarClient(a.url))
    const regions = swarm.agents.map(a => SharedRegion.create(a.shmDir ?? '', 'r', SPECS))
    const inputs = [values(0, 5), values(1, 5)]
    regions.forEach((r, i) => { r.write(inputs[i]) })
    await Promise.all(clients.map(async c => await c.register(SPECS, { region: 'r' })))
    const results = await Promise.all(clients.map(async c => await c.stepRegion({ timeout: 30 })))
    assert.ok(results.every(r => r.averaged), results.map(r => r.error).join('; '))
    for (let i = 0; i < 2; i++) {
      assert.deepEqual(plain(regions[i].read()), expected(inputs, [1, 1], i, 0.5), `agent ${i}`)
      const divergence = expectedDivergence(inputs, [1, 1], i, 0.5)
      assert.ok(Math.abs(results[i].divergence - divergence) <= 1e-12 * divergence, `agent ${i}: divergence ${results[i].divergence}, ${divergence} expected`)
    }
  } finally {
    await swarm.stop()
  }
})

// Large enough that the copy-in takes several pieces (16 MiB of float32, 2 MiB of 16-bit values at a
// time, a turn of the event loop after each), which run beside the step's matchmaking.
const LARGE: TensorSpec[] = [{ name: 'big', shape: [5_000_003] }, { name: 'half', shape: [1_500_001], dtype: 'float16' }]

/** The first index where two stored tensors differ, by name ('' when none): 6.5 M values compare faster than deepEqual's arrays. */
function firstDifference (got: Record<string, StoredValues>, want: Record<string, number[]>): string {
  for (const [name, values] of Object.entries(want)) {
    const g = got[name]
    if (g.length !== values.length) return `${name}: ${g.length} values, ${values.length} expected`
    for (let i = 0; i < values.length; i++) if (g[i] !== values[i]) return `${name}[${i}]: ${g[i]}, ${values[i]} expected`
  }
  return ''
}

test('a region step copies in beside its matchmaking: large tensors average exactly; a region refused meanwhile answers its trainer, and its partner steps on', { timeout: 120_000 }, async () => {
  const swarm = await startSidecarSwarm(2, {}, { shm: true })
  try {
    const clients = swarm.agents.map(a => new SidecarClient(a.url))
    const regions = swarm.agents.map(a => SharedRegion.create(a.shmDir ?? '', 'large', LARGE))
    const inputs = (step: number): Array<Record<string, StoredValues>> => [0, 1].map(i => dyadicValues(LARGE, i, step))
    await Promise.all(clients.map(async c => await c.register(LARGE, { region: 'large' })))
    const averageBoth = async (step: number): Promise<void> => {
      const sent = inputs(step)
      regions.forEach((r, i) => { r.write(sent[i]) })
      const results = await Promise.all(clients.map(async c => await c.stepRegion({ timeout: 30 })))
      assert.ok(results.every(r => r.averaged), results.map(r => r.error).join('; '))
      for (let i = 0; i < 2; i++) assert.equal(firstDifference(regions[i].read(), expected(sent, [1, 1], i, 1, LARGE)), '', `step ${step}, agent ${i}: the exact mean`)
    }
    await averageBoth(0)
    const held = (await clients[0].stateBinary(LARGE)).tensors

    // Agent 0's trainer wrote a NaN near the end: refused (400) once its check reaches it, its search
    // for a group ended; agent 1, stepping at the same moment, gets its step back with its own values
    // (no group, or a group that went on without agent 0).
    const sent = inputs(1)
    ;(sent[0].big as Float32Array)[5_000_000] = Number.NaN
    regions.forEach((r, i) => { r.write(sent[i]) })
    const [refused, partner] = await Promise.allSettled(clients.map(async c => await c.stepRegion({ timeout: 5 })))
    assert.equal(refused.status, 'rejected')
    const err = (refused as PromiseRejectedResult).reason as SidecarError
    assert.equal(err.status, 400, err.message)
    assert.match(err.message, /"big" in the region holds a non-finite value \(NaN\) at index 5000000/)
    assert.equal(partner.status, 'fulfilled', String((partner as PromiseRejectedResult).reason))
    assert.equal(firstDifference(regions[1].read(), expected([sent[1]], [1], 0, 1, LARGE)), '', 'the partner holds its own values')
    assert.equal(firstDifference((await clients[0].stateBinary(LARGE)).tensors, Object.fromEntries(Object.entries(held).map(([k, v]) => [k, [...v]]))), '', 'the refused step left agent 0\'s tensors as they were')

    // Both go on: the next step averages exactly.
    await averageBoth(2)
  } finally {
    await swarm.stop()
  }
})

test('binary bodies: exact means back in the same framing; a writer during a step cannot change what the group averages', { timeout: 60_000 }, async () => {
  const swarm = await startSidecarSwarm(2, {}, { shm: true })
  try {
    const [a, b] = swarm.agents.map(x => new SidecarClient(x.url))
    const region = SharedRegion.create(swarm.agents[0].shmDir ?? '', 'r', SPECS)
    const inputs = [values(0, 9), values(1, 9)]
    region.write(inputs[0])
    await a.register(SPECS, { region: 'r' })
    await b.register(SPECS)
    const stepA = a.stepRegion({ timeout: 30 })
    // A read its region when its step began; it now looks for a group while the trainer (wrongly) writes.
    await new Promise(resolve => setTimeout(resolve, 500))
    region.write(values(7, 7))
    const rb = await b.stepBinary(SPECS, inputs[1], { timeout: 30 })
    const ra = await stepA
    assert.ok(ra.averaged && rb.averaged, `${ra.error ?? ''} ${rb.error ?? ''}`)
    const mean = expected(inputs, [1, 1], 1)
    assert.deepEqual(plain(rb.tensors), mean, 'B received the exact mean of the values A read, not the later write')
    assert.deepEqual(plain(region.read()), mean, 'A wrote the same mean back')
    assert.equal(rb.bytesCopied, 2 * SPECS.reduce((n, t) => n + count(t) * (t.dtype === undefined ? 4 : 2), 0))
  } finally {
    await swarm.stop()
  }
})

test('bad regions and bodies get a 4xx with one sentence and leave the agent\'s tensors untouched', { timeout: 60_000 }, async () => {
  const swarm = await startSidecarSwarm(2, {}, { shm: true }) // one agent alone never sees a routing table fill
  try {
    const agent = swarm.agents[0]
    const dir = agent.shmDir ?? ''
    const client = new SidecarClient(agent.url)
    const expectError = async (what: string, got: Promise<unknown>, status: number, pattern: RegExp): Promise<void> => {
      await assert.rejects(got, (err: SidecarError) => {
        assert.equal(err.status, status, `${what}: ${err.message}`)
        assert.match(err.message, pattern, what)
        assert.ok(!err.message.includes('\n'), `${what}: one sentence`)
        return true
      }, what)
    }
    await expectError('missing region', client.register(SPECS, { region: 'nope' }), 400, /"nope" does not exist/)
    await expectError('a path, not a name', client.register(SPECS, { region: '../etc' }), 400, /plain file name/)
    const small = SharedRegion.create(dir, 'small', SPECS.slice(0, 2))
    await expectError('too small', client.register(SPECS, { region: 'small' }), 400, /has \d+ bytes but the registered tensors need \d+/)
    small.close()
    writeFileSync(join(dir, 'magic'), Buffer.alloc(regionLayout(SPECS).bytes))
    await expectError('bad magic', client.register(SPECS, { region: 'magic' }), 400, /magic AVSREGN1/)
    const region = SharedRegion.create(dir, 'r', SPECS)
    symlinkSync(join(dir, 'r'), join(dir, 'link'))
    await expectError('a symlink', client.register(SPECS, { region: 'link' }), 400, /symlinks are refused/)
    await expectError('too large for memory', new SidecarClient(agent.url).register(Array.from({ length: 64 }, (_x, i) => ({ name: `huge${i}`, shape: [2 ** 31] }))), 413, /needs \d+\.\d\d GiB but the agent's container has \d+\.\d\d GiB/)

    const good = values(3, 3)
    region.write(good)
    assert.deepEqual(await client.register(SPECS, { region: 'r' }), { created: true })
    await client.publishState()
    const state = async (): Promise<Record<string, number[]>> => plain((await client.stateBinary(SPECS)).tensors)
    const before = await state()
    assert.deepEqual(before, plain(good), 'POST /v1/state took the region')

    const nan = values(3, 3)
    ;(nan.w32 as Float32Array)[11] = Number.NaN
    region.write(nan)
    await expectError('NaN in the region', client.stepRegion({ timeout: 1 }), 400, /"w32" in the region holds a non-finite value \(NaN\) at index 11/)
    const inf = values(3, 3)
    ;(inf.w16 as Uint16Array)[4] = 0x7c00
    region.write(inf)
    await expectError('Inf in a float16 tensor', client.stepRegion({ timeout: 1 }), 400, /"w16" in the region holds a non-finite value \(Infinity\) at index 4/)
    region.write(good)
    const fd = openSync(join(dir, 'r'), 'r+')
    const odd = Buffer.alloc(8)
    odd.writeBigUInt64LE(BigInt(region.seq + 1))
    writeSync(fd, odd, 0, 8, 8)
    closeSync(fd)
    await expectError('odd seq', client.stepRegion({ timeout: 1 }), 409, /changed while the agent read it/)
    await expectError('another schema', client.register([{ name: 'one', shape: [1], dtype: 'float16' }]), 409, /already averages/)
    const body = frame({ timeout: 1 }, SPECS.map(t => good[t.name])).subarray(0, 40)
    await expectError('a binary body of the wrong length', fetch(`${agent.url}/v1/step`, { method: 'POST', headers: { 'content-type': 'application/vnd.avs.tensors' }, body }).then(async r => { throw new SidecarError(r.status, ((await r.json()) as { error: string }).error) }), 400, /has 40 bytes but this schema needs \d+ \(4 \+ \d+ control bytes \+ \d+ tensor bytes\)/)
    await expectError('a JSON step of 16-bit tensors', client.step({}), 400, /only the region and binary paths carry/)
    assert.deepEqual(await state(), before, 'no refused request touched the agent\'s tensors')

    // Still serving: a step that finds no group writes the agent's values back and says why.
    region.write(good)
    const r = await client.stepRegion({ timeout: 1 })
    assert.equal(r.averaged, false)
    assert.deepEqual(plain(region.read()), plain(good))
    await client.report({ loss: 0.25, samples: 64, paramsHash: '0123456789abcdef' })
    await client.report({ samples: 36 })
    assert.equal((await agent.metrics.trainerLoss.get()).values[0].value, 0.25)
    assert.equal((await agent.metrics.trainerSamples.get()).values[0].value, 100)
    assert.equal((await agent.metrics.paramsHash.get()).values[0].value, 0x456789abcdef)
    await expectError('a bad hash', client.report({ paramsHash: 'xyz' }), 400, /16 hex digits/)
  } finally {
    await swarm.stop()
  }
})
