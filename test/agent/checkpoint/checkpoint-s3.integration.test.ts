/**
 * Sidecar agents checkpointing into a real S3-compatible bucket (versitygw on loopback): the run
 * ends when the trainers finish (POST /v1/finish, spec.completion.onTrainerExit) with the final
 * round durable in the bucket; a second swarm starts from that checkpoint (spec.restoreFrom); a
 * restoreFrom round that is not there ends the agent with one sentence instead of training from
 * zeros; a missing bucket fails the writes, never the averaging.
 */
import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3'
import { startSidecarSwarm } from '../sidecar-fixture.js'
import { SidecarClient, SidecarError } from '../../../clients/typescript/sidecar-client.js'
import { S3CheckpointStore, type S3StoreOptions } from '../../../agent/checkpoint/s3-store.js'
import type { CheckpointPolicy } from '../../../agent/config.js'
import { Checkpointer } from '../../../agent/checkpoint/checkpointer.js'
import { AgentMetrics } from '../../../agent/metrics/agent-metrics.js'
import { startVersitygw, versitygwBinary, versitygwBuilt, type Versitygw } from './versitygw.js'

const N = 3
const SPECS = [{ name: 'w', shape: [5000] }, { name: 'b', shape: [3] }]
const BUCKET = 'runs'
const values = (peer: number, name: string, n: number): Float32Array => Float32Array.from({ length: n }, (_, i) => Math.cos(peer * 3.1 + i * 0.02 + name.length) * (peer + 2))
const sample = async (text: string, name: string, label = ''): Promise<number | undefined> => {
  const line = text.split('\n').find(l => l.startsWith(`${name}{`) && l.includes(label))
  return line === undefined ? undefined : Number(line.split(' ').at(-1))
}
const skip = versitygwBuilt() ? false : `versitygw is not built (${versitygwBinary()}): run scripts/build-versitygw.sh`

describe('sidecar agents with checkpoints in an S3-compatible bucket (versitygw)', { skip, timeout: 240_000 }, () => {
  let gw: Versitygw
  const s3 = (bucket = BUCKET): S3StoreOptions => ({
    endpoint: gw.endpoint, region: 'us-east-1', bucket, prefix: 'team-a', forcePathStyle: true,
    credentials: { accessKeyId: gw.accessKeyId, secretAccessKey: gw.secretAccessKey }
  })
  const policy = (extra: Partial<CheckpointPolicy> = {}, bucket = BUCKET): CheckpointPolicy => ({ store: { kind: 's3', ...s3(bucket) }, every: 100, keep: 3, ...extra })
  /** The final state of the first swarm, what the second must start from. */
  let finalState: Record<string, Float32Array> = {}

  before(async () => {
    gw = await startVersitygw()
    const raw = new S3Client({ endpoint: gw.endpoint, region: 'us-east-1', forcePathStyle: true, credentials: { accessKeyId: gw.accessKeyId, secretAccessKey: gw.secretAccessKey } })
    await raw.send(new CreateBucketCommand({ Bucket: BUCKET }))
    raw.destroy()
  })
  after(async () => { await gw?.stop() })

  test('the run ends when the trainers finish: the final round is durable in the bucket and equals the exact mean', async () => {
    const swarm = await startSidecarSwarm(N, {}, { checkpoint: policy(), completionOnTrainerExit: true, swarm: 'first' })
    try {
      const clients = swarm.agents.map(a => new SidecarClient(a.url))
      await Promise.all(clients.map(async c => await c.register(SPECS)))
      let current = clients.map((_, p) => Object.fromEntries(SPECS.map(s => [s.name, values(p, s.name, s.shape[0])])))
      let averaged = 0
      for (let attempt = 0; attempt < 8 && averaged < 2; attempt++) {
        const results = await Promise.all(clients.map(async (c, p) => await c.step(current[p], { timeout: 20 })))
        if (!results.every(r => r.averaged)) continue
        for (const s of SPECS) {
          for (let i = 0; i < s.shape[0]; i++) {
            const mean = current.reduce((sum, t) => sum + t[s.name][i], 0) / N
            assert.ok(Math.abs(results[0].tensors[s.name][i] - mean) <= 1e-6 * Math.max(1, Math.abs(mean)), `${s.name}[${i}]`)
          }
        }
        averaged++
        current = results.map(r => r.tensors)
      }
      assert.equal(averaged, 2, 'two rounds averaged')
      const round = (await clients[0].status()).round as number
      // No interval checkpoint yet (every 100): the final one is written because the trainers finished.
      const finished = await Promise.all(clients.map(async c => await c.finish()))
      for (const f of finished) {
        assert.equal(f.complete, true)
        assert.equal(f.checkpointRound, round, `the final checkpoint is the last averaged round (${JSON.stringify(finished)})`)
      }
      for (const a of swarm.agents) assert.equal(await sample(await a.metrics.registry.metrics(), 'averaging_completed'), 1)
      const store = new S3CheckpointStore(s3())
      try {
        const { checkpoint } = await store.loadNewest('first', SPECS, { log: () => {} })
        assert.equal(checkpoint?.manifest.round, round)
        assert.match(checkpoint.path, /^s3:\/\/runs\/team-a\/first\/round-\d+-[0-9a-f]{12}\.safetensors$/)
        for (const s of SPECS) assert.deepEqual(checkpoint.tensors.get(s.name), current[0][s.name], s.name)
        finalState = Object.fromEntries(SPECS.map(s => [s.name, checkpoint.tensors.get(s.name)!]))
      } finally { store.destroy() }
      // A step after the finish averages no more.
      const afterStep = await clients[0].step(current[0], { timeout: 5 })
      assert.equal(afterStep.complete, true)
      assert.equal(afterStep.averaged, false)
    } finally {
      await swarm.stop()
    }
  })

  test('a new swarm starts from another swarm\'s checkpoint in the bucket (restoreFrom), then averages on from its round', async () => {
    assert.ok(Object.keys(finalState).length > 0, 'the first test left a checkpoint')
    const swarm = await startSidecarSwarm(2, {}, { checkpoint: policy({ restoreFrom: { swarm: 'first' }, every: 1 }), swarm: 'second' })
    try {
      const clients = swarm.agents.map(a => new SidecarClient(a.url))
      await Promise.all(clients.map(async c => await c.register(SPECS)))
      const states = await Promise.all(clients.map(async c => await c.state()))
      for (const st of states) {
        assert.equal(st.origin, 'checkpoint')
        for (const s of SPECS) assert.deepEqual(st.tensors[s.name], finalState[s.name], s.name)
      }
      const startRound = (await clients[0].status()).round as number
      assert.ok(startRound >= 2, `continues from the first swarm's round (${startRound})`)
      const results = await Promise.all(clients.map(async c => await c.step(finalState, { timeout: 20 })))
      assert.ok(results.every(r => r.averaged), JSON.stringify(results.map(r => r.error)))
      assert.equal(results[0].round, startRound + 1)
      // Its own checkpoints go to its own folder in the bucket, never into the first swarm's.
      const store = new S3CheckpointStore(s3())
      try {
        await swarm.agents[0].ctx?.checkpointer?.drain()
        await swarm.agents[1].ctx?.checkpointer?.drain()
        const own = await store.list('second')
        assert.deepEqual(own.filter(c => c.manifest).map(c => c.round), [startRound + 1])
        assert.equal((await store.list('first')).filter(c => c.manifest).length, 1)
      } finally { store.destroy() }
    } finally {
      await swarm.stop()
    }
  })

  test('restoreFrom a round that is not in the bucket ends the agent with one sentence, and the trainer hears it', async () => {
    const swarm = await startSidecarSwarm(2, {}, { checkpoint: policy({ restoreFrom: { swarm: 'first', round: 7 } }), swarm: 'third' })
    try {
      const client = new SidecarClient(swarm.agents[0].url)
      await assert.rejects(client.register(SPECS), (err: SidecarError) => {
        assert.equal(err.status, 503)
        assert.match(err.message, /restoreFrom: swarm first has no checkpoint of round 7 at s3:\/\/runs\/team-a\/first\/ \(its complete ones are round \d+\)$/)
        return true
      })
      await assert.rejects(swarm.agents[0].run!, /restoreFrom: swarm first has no checkpoint of round 7/)
    } finally {
      await swarm.stop()
    }
  })

  test('a missing bucket fails every checkpoint write with one sentence, and averaging goes on', async () => {
    const swarm = await startSidecarSwarm(2, {}, { checkpoint: policy({ every: 1 }, 'no-such-bucket'), swarm: 'fourth' })
    try {
      const clients = swarm.agents.map(a => new SidecarClient(a.url))
      await Promise.all(clients.map(async c => await c.register(SPECS)))
      const inputs = clients.map((_, p) => Object.fromEntries(SPECS.map(s => [s.name, values(p, s.name, s.shape[0])])))
      let averaged = 0
      for (let attempt = 0; attempt < 6 && averaged < 2; attempt++) {
        const results = await Promise.all(clients.map(async (c, p) => await c.step(inputs[p], { timeout: 20 })))
        if (results.every(r => r.averaged)) averaged++
        for (const a of swarm.agents) await a.ctx?.checkpointer?.drain()
      }
      assert.equal(averaged, 2, 'averaging goes on without its checkpoints')
      const failed = await Promise.all(swarm.agents.map(async a => await sample(await a.metrics.registry.metrics(), 'averaging_checkpoint_writes_total', 'outcome="failed"')))
      assert.ok(failed.reduce<number>((n, x) => n + (x ?? 0), 0) >= 2, `failed writes are counted (${JSON.stringify(failed)})`)
      // What the log says, one sentence naming the bucket and the server.
      const lines: string[] = []
      const cp = new Checkpointer(policy({ every: 1 }, 'no-such-bucket'), 'fourth', new AgentMetrics('t'), { info: () => {}, warn: (l) => lines.push(l) })
      try {
        await cp.afterRound({ round: 1, peers: ['a'], self: 'a', samples: 1 }, { bytes: 0, copy: () => [{ name: 'w', dtype: 'float32', shape: [2], data: new Float32Array(2) }] })
        await cp.drain()
      } finally { cp.close() }
      assert.deepEqual(lines, [`checkpoint of round 1 failed: The bucket "no-such-bucket" does not exist at ${gw.endpoint}.`])
    } finally {
      await swarm.stop()
    }
  })
})
