import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startSidecarSwarm } from '../../sidecar-fixture.js'
import { sidecarWorkload } from '../../../../agent/workloads/sidecar/workload.js'
import { SidecarClient, SidecarError, encodeFloat32 } from '../../../../clients/typescript/sidecar-client.js'
import { fill, maxAbsDiff, weightedMean } from '../../swarm-fixture.js'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { dirname, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const exampleTrainer = resolve(dirname(fileURLToPath(import.meta.url)), '../../../../clients/typescript/example-trainer.js')

const SPECS = [{ name: 'w', shape: [64, 33] }, { name: 'b', shape: [33] }]
const values = (agent: number): Record<string, Float32Array> => ({ w: fill(64 * 33, agent * 2 + 1), b: fill(33, agent * 2 + 2) })

test('three agents driven by the TypeScript client each get the exact weighted mean back', { timeout: 120_000 }, async () => {
  const swarm = await startSidecarSwarm(3)
  try {
    assert.ok(swarm.agents.every(a => a.ready), 'each agent is ready once its API listens')
    const clients = swarm.agents.map(a => new SidecarClient(a.url))
    await assert.rejects(clients[0].state(), (err: SidecarError) => err.status === 409 && /register/.test(err.message))
    for (const c of clients) assert.deepEqual(await c.register(SPECS), { created: true })
    assert.deepEqual(await clients[0].register(SPECS), { created: false }, 'registering the same tensors again is a no-op')

    const weights = [1, 2, 5]
    const results = await Promise.all(clients.map(async (c, i) => await c.step(values(i), { weight: weights[i], gather: { agent: i }, timeout: 30 })))
    for (const [i, r] of results.entries()) {
      assert.equal(r.averaged, true, `agent ${i}: ${r.error ?? ''}`)
      assert.equal(r.groupSize, 3)
      assert.deepEqual(Object.values(r.gathered).map(g => (g as { agent: number }).agent).sort(), [0, 1, 2])
      for (const { name } of SPECS) {
        const expected = weightedMean([0, 1, 2].map(a => values(a)[name]), weights)
        const err = maxAbsDiff(r.tensors[name], expected)
        assert.ok(err < 1e-5, `agent ${i} tensor ${name}: max error ${err}`)
      }
      assert.ok(r.divergence > 0, 'the round moved every trainer')
    }
    const state = await clients[1].state()
    assert.equal(state.origin, 'averaged')
    assert.deepEqual(state.tensors.w, results[1].tensors.w, 'state returns the averaged tensors')
    const status = await clients[2].status()
    assert.deepEqual(status.steps, { averaged: 1, failed: 0 })
    const rounds = await swarm.agents[0].metrics.rounds.get()
    assert.equal(rounds.values.find(v => v.labels.outcome === 'success')?.value, 1, 'the round shows in the agent metrics')
  } finally {
    await swarm.stop()
  }
})

test('bad requests get a 4xx with one sentence and the agent keeps serving', { timeout: 120_000 }, async () => {
  const swarm = await startSidecarSwarm(2)
  try {
    const [a, b] = swarm.agents.map(x => x.url)
    const post = async (url: string, body: string | Buffer, type = 'application/json'): Promise<{ status: number, error: string }> => {
      const res = await fetch(url, { method: 'POST', headers: { 'content-type': type }, body })
      const json = await res.json() as { error: string }
      return { status: res.status, error: json.error }
    }
    const expectError = async (what: string, got: Promise<{ status: number, error: string }>, status: number, pattern: RegExp): Promise<void> => {
      const r = await got
      assert.equal(r.status, status, `${what}: ${r.error}`)
      assert.match(r.error, pattern, what)
      assert.ok(!r.error.includes('\n') && !r.error.includes('    at '), `${what}: one sentence, no stack: ${r.error}`)
    }
    const valid = JSON.stringify({ tensors: { w: encodeFloat32(values(0).w), b: encodeFloat32(values(0).b) } })
    await expectError('step before register', post(`${a}/v1/step`, valid), 409, /register/)
    await expectError('malformed JSON', post(`${a}/v1/register`, '{"tensors": ['), 400, /not valid JSON/)
    await expectError('register without tensors', post(`${a}/v1/register`, '{"tensor": []}'), 400, /"tensors" array/)
    await expectError('bad shape', post(`${a}/v1/register`, JSON.stringify({ tensors: [{ name: 'w', shape: [0, 3] }] })), 400, /positive integers/)
    await expectError('unknown endpoint', fetch(`${a}/v2/step`).then(async r => ({ status: r.status, error: ((await r.json()) as { error: string }).error })), 404, /no endpoint/)
    await expectError('wrong method', fetch(`${a}/v1/step`).then(async r => ({ status: r.status, error: ((await r.json()) as { error: string }).error })), 405, /takes POST/)

    assert.equal((await post(`${a}/v1/register`, JSON.stringify({ tensors: SPECS }))).status, 201)
    await expectError('a different schema', post(`${a}/v1/register`, JSON.stringify({ tensors: [{ name: 'w', shape: [10] }] })), 409, /already averages w\[64,33\], b\[33\]/)
    const short = JSON.stringify({ tensors: { w: encodeFloat32(new Float32Array(5)), b: encodeFloat32(values(0).b) } })
    await expectError('wrong tensor length', post(`${a}/v1/step`, short), 400, /"w" has 5 values but its shape \[64, 33\] needs 2112/)
    const unknown = JSON.stringify({ tensors: { w: encodeFloat32(values(0).w), b: encodeFloat32(values(0).b), extra: encodeFloat32(new Float32Array(1)) } })
    await expectError('unknown tensor name', post(`${a}/v1/step`, unknown), 400, /unknown tensor "extra"/)
    await expectError('missing tensor', post(`${a}/v1/step`, JSON.stringify({ tensors: { w: encodeFloat32(values(0).w) } })), 400, /"b" is missing/)
    await expectError('not base64', post(`${a}/v1/step`, JSON.stringify({ tensors: { w: '!!!!', b: encodeFloat32(values(0).b) } })), 400, /not valid base64/)
    const nan = values(0).b
    nan[7] = Number.NaN
    await expectError('non-finite value', post(`${a}/v1/step`, JSON.stringify({ tensors: { w: encodeFloat32(values(0).w), b: encodeFloat32(nan) } })), 400, /non-finite value \(NaN\) at index 7/)
    await expectError('negative weight', post(`${a}/v1/step`, JSON.stringify({ weight: -1, tensors: {} })), 400, /weight must be/)
    await expectError('body too large', post(`${a}/v1/step`, Buffer.alloc(4 * 1024 * 1024, 32)), 413, /limit/)
    await expectError('register body too large', post(`${b}/v1/register`, Buffer.alloc(5 * 1024 * 1024, 32)), 413, /limit/)

    // Still serving: both agents register and average.
    const clients = [new SidecarClient(a), new SidecarClient(b)]
    await clients[1].register(SPECS)
    const results = await Promise.all(clients.map(async (c, i) => await c.step(values(i), { timeout: 30 })))
    const expected = weightedMean([values(0).w, values(1).w], [1, 1])
    for (const r of results) {
      assert.equal(r.averaged, true, r.error)
      assert.ok(maxAbsDiff(r.tensors.w, expected) < 1e-5)
    }
  } finally {
    await swarm.stop()
  }
})

test('a step that finds no group says why and hands the trainer its own values back', { timeout: 60_000 }, async () => {
  const swarm = await startSidecarSwarm(2)
  try {
    const client = new SidecarClient(swarm.agents[0].url)
    await client.register(SPECS)
    const r = await client.step(values(0), { timeout: 2 })
    assert.equal(r.averaged, false)
    assert.match(r.error ?? '', /\S/)
    assert.deepEqual(r.tensors.w, values(0).w)
    assert.equal((await client.state()).origin, 'trainer')
  } finally {
    await swarm.stop()
  }
})

test('two TypeScript example trainers on their own agents average every period and end on the same weights', { timeout: 120_000 }, async () => {
  const swarm = await startSidecarSwarm(2)
  try {
    const outs = await Promise.all(swarm.agents.map(async (a, shard) =>
      (await promisify(execFile)(process.execPath, [exampleTrainer, '--url', a.url, '--shard', String(shard), '--json'], { timeout: 90_000 })).stdout))
    const [r0, r1] = outs.map(o => JSON.parse(o.trim().split('\n').at(-1) ?? '') as { rounds: number, failed: number, heldOutLoss: number, w: number[], b: number[] })
    for (const r of [r0, r1]) {
      assert.equal(r.failed, 0)
      assert.equal(r.rounds, 5, 'every period ended in an averaging round')
      assert.ok(r.heldOutLoss < 0.2, `held-out loss ${r.heldOutLoss}`)
    }
    assert.deepEqual(r0.w, r1.w, 'both trainers hold the same weights after the last round')
    assert.deepEqual(r0.b, r1.b)
  } finally {
    await swarm.stop()
  }
})

test('a taken port fails with one sentence; SIGTERM ends a waiting step, closes the API and marks the agent unready', { timeout: 60_000 }, async () => {
  const swarm = await startSidecarSwarm(2)
  const agent = swarm.agents[0]
  try {
    const port = Number(new URL(agent.url).port)
    const ctx = agent.ctx
    assert.ok(ctx !== undefined)
    await assert.rejects(sidecarWorkload(ctx, { host: '127.0.0.1', port }).run(), { message: `the sidecar port 127.0.0.1:${port} is already in use` })
    const client = new SidecarClient(agent.url)
    await client.register(SPECS)
    const waiting = client.step(values(0), { timeout: 120 })
    await new Promise(resolve => setTimeout(resolve, 500))
    const started = Date.now()
    await swarm.stop()
    const r = await waiting
    assert.equal(r.averaged, false, 'the step left its search')
    assert.ok(Date.now() - started < 15_000, `shutdown took ${Date.now() - started} ms`)
    assert.equal(agent.ready, false)
    await assert.rejects(fetch(`${agent.url}/v1/status`), 'the API no longer listens')
  } finally {
    await swarm.stop()
  }
})

test('with state sharing, a trainer that registers late starts from the swarm\'s averaged tensors', { timeout: 120_000 }, async () => {
  const swarm = await startSidecarSwarm(3, { targetGroupSize: 2, minGroupSize: 2 }, { stateSharing: true })
  try {
    const clients = swarm.agents.map(a => new SidecarClient(a.url))
    // One at a time: registered together, the second's download may already find the first as a donor.
    await clients[0].register(SPECS)
    assert.equal((await clients[0].state()).origin, 'initial', 'the first trainer finds no donor')
    await clients[1].register(SPECS)
    const results = await Promise.all(clients.slice(0, 2).map(async (c, i) => await c.step(values(i), { timeout: 30 })))
    assert.ok(results.every(r => r.averaged), results.map(r => r.error).join('; '))
    await clients[2].register(SPECS)
    const state = await clients[2].state()
    assert.equal(state.origin, 'peers')
    assert.deepEqual(state.tensors.w, results[0].tensors.w, 'the newcomer holds the swarm\'s averaged w')
    assert.deepEqual(state.tensors.b, results[0].tensors.b)
  } finally {
    await swarm.stop()
  }
})
