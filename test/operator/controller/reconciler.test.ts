/**
 * The Reconciler on its two seams (ObjectCache, ClusterApi), with an in-memory cluster behind
 * both: what it writes, in which order, and what it leaves alone.
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { AveragingSwarm, AveragingSwarmStatus } from '../../../api/v1alpha1/types.js'
import { DEFAULT_BUILDER_CONFIG } from '../../../operator/builders/config.js'
import type { KubeObj } from '../../../operator/objects.js'
import { Reconciler, type ReconcilerDeps } from '../../../operator/controller/reconciler.js'
import { ApiError } from '../../../operator/kube/rest.js'
import { swarm } from '../builders/fixture.js'
import { CACHED, MemoryCluster } from './memory-cluster.js'
import { ProgressTracker } from '../../../operator/controller/progress.js'

const KEY = 'ml/demo'
const silent = { info () {}, warn () {}, debug () {} }

function setup (spec: Parameters<typeof swarm>[0] = { replicas: 4, bootstrap: { replicas: 1 }, auxiliary: { replicas: 1 } }, deps: Partial<ReconcilerDeps> = {}) {
  const cluster = new MemoryCluster()
  cluster.put(swarm(spec) as unknown as KubeObj)
  let t = Date.parse('2026-11-22T04:00:00Z')
  const reported: Array<AveragingSwarmStatus | undefined> = []
  const r = new Reconciler({
    cache: cluster,
    api: cluster.api,
    config: DEFAULT_BUILDER_CONFIG,
    log: silent,
    clock: () => new Date(t),
    onStatus: (_s, st) => reported.push(st),
    ...deps
  })
  return {
    cluster,
    r,
    reported,
    /** Moves the clock on (the status write spacing counts on it). */
    later (ms = 60_000) { t += ms }
  }
}

const writesOf = (calls: string[]) => calls.filter(c => !c.startsWith('get ') && !c.startsWith('event '))
const reasons = (c: MemoryCluster) => c.takeEvents().map(e => `${e.type}/${e.reason}`)
const cond = (st: AveragingSwarmStatus | undefined, type: string) => st?.conditions?.find(c => c.type === type)

test('first reconcile: every object applied, then the status, then the events', async () => {
  const { cluster, r } = setup()
  const res = await r.reconcile(KEY)
  const calls = cluster.takeCalls()
  const applies = calls.filter(c => c.startsWith('apply '))
  assert.deepEqual(applies.sort(), [
    'apply ConfigMap/demo-config', 'apply ConfigMap/demo-members', 'apply PodDisruptionBudget/demo', 'apply Secret/demo-identity', 'apply Service/demo-agents',
    'apply StatefulSet/demo-agent', 'apply StatefulSet/demo-aux', 'apply StatefulSet/demo-bootstrap-0'
  ])
  assert.equal(res.writes, applies.length + 1)
  const statusAt = calls.indexOf('applyStatus demo')
  assert.ok(statusAt > calls.findLastIndex(c => c.startsWith('apply ')), calls.join('\n'))
  assert.ok(calls.slice(0, statusAt).every(c => !c.startsWith('event ')), `events only after the status write:\n${calls.join('\n')}`)
  assert.equal(calls.filter(c => c.startsWith('event ')).length, 8)
  assert.ok(reasons(cluster).every(r => r === 'Normal/Created'))
  assert.equal(cluster.swarmStatus('ml', 'demo')?.phase, 'Progressing') // the new StatefulSets have not been observed yet
  assert.equal(res.status?.bootstrapPeers?.length, 1)
  assert.equal(res.requeueAfterMs, 15_000) // Progressing: look again while agents start
})

test('steady state: a settled swarm makes 0 writes and sends no request at all', async () => {
  const { cluster, r, reported, later } = setup()
  await r.reconcile(KEY)
  cluster.takeEvents()
  cluster.settle()
  later()
  const ready = await r.reconcile(KEY)
  assert.equal(ready.writes, 1) // the status, Ready now
  assert.equal(ready.status?.phase, 'Ready')
  assert.deepEqual(reasons(cluster), ['Normal/SwarmReady'])
  cluster.takeCalls()
  for (let i = 0; i < 3; i++) {
    later()
    const res = await r.reconcile(KEY)
    assert.equal(res.writes, 0)
    assert.equal(res.requeueAfterMs, undefined)
    assert.equal(res.status?.phase, 'Ready')
  }
  assert.deepEqual(cluster.takeCalls(), [])
  assert.equal(reported.at(-1)?.phase, 'Ready') // metrics still hear of the swarm
})

test('scale-down prunes the objects no longer wanted, scales the rest, and leaves a look-alike alone', async () => {
  const { cluster, r, later } = setup({ replicas: 6, bootstrap: { replicas: 2 }, auxiliary: { replicas: 1 } })
  await r.reconcile(KEY)
  cluster.settle()
  later()
  await r.reconcile(KEY)
  // Someone else's StatefulSet with the swarm's label but no owner reference.
  cluster.put({ apiVersion: 'apps/v1', kind: 'StatefulSet', metadata: { name: 'demo-extra', namespace: 'ml', labels: { 'averaging.swarm.io/swarm': 'demo' } }, spec: { replicas: 1 } })
  const auxUid = cluster.get('StatefulSet', 'ml', 'demo-aux')?.metadata.uid
  cluster.takeCalls(); cluster.takeEvents()

  cluster.editSwarm('ml', 'demo', s => { s.spec.replicas = 3; s.spec.bootstrap.replicas = 1; s.spec.auxiliary.replicas = 0 })
  later()
  const res = await r.reconcile(KEY)
  const calls = cluster.takeCalls()
  assert.deepEqual(calls.filter(c => c.startsWith('delete ')).sort(), ['delete StatefulSet/demo-aux', 'delete StatefulSet/demo-bootstrap-1'])
  assert.ok(calls.includes('apply StatefulSet/demo-agent'), calls.join('\n'))
  assert.equal(res.writes, writesOf(calls).length)
  assert.equal(cluster.get('StatefulSet', 'ml', 'demo-aux'), undefined)
  assert.equal(cluster.get('StatefulSet', 'ml', 'demo-bootstrap-1'), undefined)
  assert.notEqual(cluster.get('StatefulSet', 'ml', 'demo-extra'), undefined)
  assert.equal((cluster.get('StatefulSet', 'ml', 'demo-agent') as any).spec.replicas, 2)
  assert.notEqual(auxUid, undefined)
  const events = cluster.takeEvents()
  assert.ok(events.some(e => e.reason === 'Scaled' && e.message === 'Scaled demo-agent from 4 to 2.'), JSON.stringify(events))
  assert.ok(events.some(e => e.reason === 'Deleted' && e.message === 'Deleted StatefulSet demo-aux, no longer wanted.'))
  assert.ok(events.some(e => e.reason === 'Deleted' && e.message === 'Deleted StatefulSet demo-bootstrap-1, no longer wanted.'))
  assert.equal(res.status?.observedGeneration, 2)

  // The pods go, the swarm settles at the new size, and nothing more is written.
  cluster.settle()
  later()
  const settled = await r.reconcile(KEY)
  assert.equal(settled.status?.phase, 'Ready')
  assert.equal(settled.status?.replicas, 3)
  assert.equal(settled.status?.auxiliaryReplicas, 0)
  cluster.takeCalls()
  later()
  assert.equal((await r.reconcile(KEY)).writes, 0)
  assert.deepEqual(cluster.takeCalls(), [])
})

test('a 404 on the status write: the swarm was deleted meanwhile; reconcile ends quietly, no events', async () => {
  const { cluster, r, reported } = setup()
  cluster.failNext('applyStatus', new ApiError(404, 'averagingswarms.averaging.swarm.io "demo" not found', 'NotFound'))
  const res = await r.reconcile(KEY)
  const calls = cluster.takeCalls()
  assert.deepEqual(res, { writes: calls.filter(c => c.startsWith('apply ')).length })
  assert.equal(calls.at(-1), 'applyStatus demo')
  assert.equal(calls.filter(c => c.startsWith('event ')).length, 0)
  assert.deepEqual(reported, [])
})

test('any other error on the status write fails the reconcile (the queue retries it)', async () => {
  const { cluster, r } = setup()
  cluster.failNext('applyStatus', new ApiError(500, 'etcdserver: request timed out'))
  await assert.rejects(r.reconcile(KEY), /etcdserver: request timed out/)
  assert.equal(cluster.events.length, 0)
})

test('deferred status: changes within minStatusIntervalMs wait for one write, errors do not', async () => {
  const { cluster, r, later } = setup(undefined, { minStatusIntervalMs: 1000 })
  await r.reconcile(KEY) // writes Progressing at t
  cluster.takeCalls(); cluster.takeEvents()
  cluster.settle()
  later(200)
  const deferred = await r.reconcile(KEY)
  assert.equal(deferred.writes, 0)
  assert.equal(deferred.requeueAfterMs, 800)
  assert.equal(deferred.status?.phase, 'Ready')
  assert.equal(cluster.swarmStatus('ml', 'demo')?.phase, 'Progressing')
  assert.deepEqual(cluster.takeCalls(), [])
  later(800)
  const written = await r.reconcile(KEY)
  assert.equal(written.writes, 1)
  assert.equal(cluster.swarmStatus('ml', 'demo')?.phase, 'Ready')
  assert.deepEqual(reasons(cluster), ['Normal/SwarmReady'])

  // A failed apply right after a write is reported at once, with one Warning per distinct failure.
  cluster.editSwarm('ml', 'demo', (s: AveragingSwarm) => { s.spec.image = 'agent:v2' })
  cluster.failNext('apply', new ApiError(422, 'StatefulSet.apps "demo-agent" is invalid'))
  later(100)
  await assert.rejects(r.reconcile(KEY), /is invalid/)
  const degraded = cond(cluster.swarmStatus('ml', 'demo'), 'Degraded')
  assert.equal(degraded?.reason, 'ReconcileFailed')
  assert.match(degraded?.message ?? '', /is invalid\.$/)
  // The failure itself, then the phase change to Degraded.
  assert.deepEqual(reasons(cluster), ['Warning/ReconcileFailed', 'Warning/ReconcileFailed'])
  // The same failure again: status unchanged, no new event.
  cluster.failNext('apply', new ApiError(422, 'StatefulSet.apps "demo-agent" is invalid'))
  later(2000)
  cluster.takeCalls()
  await assert.rejects(r.reconcile(KEY), /is invalid/)
  assert.deepEqual(cluster.takeCalls().filter(c => !c.startsWith('apply ')), [])
  assert.deepEqual(reasons(cluster), [])
  // The next try succeeds: Degraded clears.
  later(2000)
  await r.reconcile(KEY)
  assert.equal(cond(cluster.swarmStatus('ml', 'demo'), 'Degraded')?.status, 'False')
})

test('a deleted swarm: nothing written, metrics forget it', async () => {
  const { cluster, r, reported } = setup()
  await r.reconcile(KEY)
  cluster.remove('AveragingSwarm', 'ml', 'demo')
  cluster.takeCalls()
  assert.deepEqual(await r.reconcile(KEY), { writes: 0 })
  assert.deepEqual(cluster.takeCalls(), [])
  assert.equal(reported.at(-1), undefined)
})

/** A swarm that checkpoints and ends after 100 rounds; its agents' /metrics say what `agentsDone` says. */
function finishingSwarm (completion: { rounds: number, podPolicy?: 'Delete' | 'Keep' }, ttlSecondsAfterFinished?: number) {
  let agentsDone = false
  const fetcher = async () => [
    'averaging_rounds_total{swarm="demo",outcome="success"} 100',
    'averaging_checkpoint_round{swarm="demo"} 100',
    'averaging_checkpoint_timestamp_seconds{swarm="demo"} 1795000000',
    'averaging_checkpoint_writes_total{swarm="demo",outcome="failed"} 0',
    `averaging_completed{swarm="demo"} ${agentsDone ? 1 : 0}`
  ].join('\n') + '\n'
  const progress = new ProgressTracker(() => {}, fetcher, { intervalMs: 60_000, sampleSize: 32, timeoutMs: 1000 })
  const env = setup({ replicas: 4, bootstrap: { replicas: 1 }, auxiliary: { replicas: 1 }, checkpoint: { volume: { claimName: 'ckpt' } }, completion, ttlSecondsAfterFinished }, { progress })
  env.cluster.put({ apiVersion: 'v1', kind: 'PersistentVolumeClaim', metadata: { name: 'ckpt', namespace: 'ml' } })
  return { ...env, progress, finish () { agentsDone = true } }
}

const replicasOf = (c: MemoryCluster) => Object.fromEntries(c.list('StatefulSet').map((o: any) => [o.metadata.name, o.spec.replicas]))

test('completion: completionTime once every Ready agent reports it, then the agents scaled to zero (Delete), then Complete, the status kept, nothing more written', async () => {
  const { cluster, r, later, progress, finish } = finishingSwarm({ rounds: 100 })
  await r.reconcile(KEY)
  cluster.settle()
  later()
  await r.reconcile(KEY)
  await progress.scrapeAll()
  later()
  const running = await r.reconcile(KEY)
  assert.equal(running.status?.phase, 'Ready')
  assert.equal(cond(running.status, 'Complete')?.message, '0 of 4 Ready agents completed their run (at 100 averaging rounds).')
  assert.deepEqual(running.status?.checkpoint, { round: 100, time: '2026-11-18T11:06:40Z', location: 'pvc/ckpt/demo/round-100.json' })

  finish()
  await progress.scrapeAll()
  cluster.takeEvents()
  later()
  const done = await r.reconcile(KEY)
  assert.equal(done.status?.phase, 'Progressing', 'the result is saved; the agents are still to be stopped')
  assert.equal(cond(done.status, 'Complete')?.status, 'False')
  assert.equal(cond(done.status, 'Complete')?.reason, 'Stopping')
  const completionTime = cluster.swarmStatus('ml', 'demo')?.completionTime
  assert.equal(completionTime, '2026-11-22T04:03:00Z')
  assert.deepEqual(reasons(cluster), [])

  // The written completionTime scales every agent to zero (the status write queues this reconcile in production).
  cluster.takeCalls()
  later()
  await r.reconcile(KEY)
  assert.deepEqual(replicasOf(cluster), { 'demo-agent': 0, 'demo-aux': 0, 'demo-bootstrap-0': 0 })
  cluster.settle()
  later()
  const stopped = await r.reconcile(KEY)
  assert.equal(stopped.status?.phase, 'Succeeded')
  assert.equal(cond(stopped.status, 'Complete')?.status, 'True', 'Complete once the agents are stopped, as a Job\'s')
  assert.equal(cond(stopped.status, 'Ready')?.reason, 'Completed')
  assert.deepEqual(reasons(cluster).filter(x => x !== 'Normal/Scaled'), ['Normal/Completed'])
  assert.equal(stopped.status?.completionTime, completionTime)
  assert.equal(stopped.requeueAfterMs, undefined, 'no TTL: nothing left to wait for')
  assert.deepEqual(stopped.status?.checkpoint?.round, 100)
  cluster.takeCalls()
  later()
  assert.equal((await r.reconcile(KEY)).writes, 0)
  assert.deepEqual(cluster.takeCalls(), [], 'a finished swarm is at steady state')
})

test('completion with podPolicy Keep leaves the agents running; ttlSecondsAfterFinished deletes the swarm once it passes, after an event', async () => {
  const { cluster, r, later, progress, finish } = finishingSwarm({ rounds: 100, podPolicy: 'Keep' }, 120)
  await r.reconcile(KEY)
  cluster.settle()
  later()
  await r.reconcile(KEY)
  finish()
  await progress.scrapeAll()
  later()
  const done = await r.reconcile(KEY)
  assert.equal(done.status?.phase, 'Succeeded')
  assert.equal(done.requeueAfterMs, 120_000, 'looked at again when the TTL passes')
  later(60_000)
  const waiting = await r.reconcile(KEY)
  assert.equal(waiting.requeueAfterMs, 60_000)
  assert.deepEqual(replicasOf(cluster), { 'demo-agent': 3, 'demo-aux': 1, 'demo-bootstrap-0': 1 }, 'Keep: agents stay')
  cluster.takeCalls(); cluster.takeEvents()
  later(60_000)
  assert.deepEqual(await r.reconcile(KEY), { writes: 1 })
  assert.deepEqual(cluster.takeCalls(), ['event Normal/TTLExpired', 'delete AveragingSwarm/demo'])
  assert.equal(cluster.get('AveragingSwarm', 'ml', 'demo'), undefined)
  assert.match(cluster.takeEvents()[0].message, /ttlSecondsAfterFinished \(120 s\) passed since it completed at 2026-11-22T04:02:00Z\.$/)
})

test('an exposed swarm (HostPort): addresses follow the pods onto their nodes, then nothing is written', async () => {
  const cluster = new MemoryCluster([...CACHED, 'Node'])
  cluster.put(swarm({ replicas: 2, bootstrap: { replicas: 1 }, network: { expose: { type: 'HostPort' } } }) as unknown as KubeObj)
  cluster.put({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'gpu-a', namespace: '' }, status: { addresses: [{ type: 'InternalIP', address: '10.0.0.5' }, { type: 'ExternalIP', address: '203.0.113.7' }] } })
  let t = Date.parse('2026-11-22T04:00:00Z')
  const r = new Reconciler({ cache: cluster, api: cluster.api, config: DEFAULT_BUILDER_CONFIG, log: silent, clock: () => new Date(t) })
  const first = await r.reconcile(KEY)
  assert.deepEqual(first.status?.bootstrapPeers, [], 'no pod has a node yet')
  assert.ok(cluster.takeCalls().includes('apply ConfigMap/demo-announce'))
  cluster.settle()
  for (const name of ['demo-bootstrap-0-0', 'demo-agent-0']) {
    const pod = cluster.get('Pod', 'ml', name)!
    cluster.put({ ...pod, spec: { nodeName: 'gpu-a' } })
  }
  t += 60_000
  const placed = await r.reconcile(KEY)
  assert.match(placed.status?.bootstrapPeers?.[0] ?? '', /^\/ip4\/203\.0\.113\.7\/tcp\/31337\/p2p\/12D3KooW/)
  assert.deepEqual((cluster.get('ConfigMap', 'ml', 'demo-announce') as any).data, { 'demo-agent-0': '/ip4/203.0.113.7/tcp/31337', 'demo-bootstrap-0-0': '/ip4/203.0.113.7/tcp/31337' })
  assert.ok(!cluster.takeCalls().some(c => c.startsWith('apply StatefulSet')), 'an address is no reason to roll the agents')
  t += 60_000
  assert.equal((await r.reconcile(KEY)).writes, 0)
  assert.deepEqual(cluster.takeCalls(), [])
})
