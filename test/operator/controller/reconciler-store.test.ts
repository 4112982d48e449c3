/**
 * The Reconciler and the checkpoint store (claimTemplate, a named claim, the S3 Secret) and
 * spec.backoffLimit, on the in-memory cluster: the claim created once and never owned, a missing
 * store leaving the pods without checkpoints until it appears, and a Failed swarm scaled to zero
 * and deleted after its TTL.
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { PartialSpec } from '../../../api/v1alpha1/defaults.js'
import type { AveragingSwarmStatus } from '../../../api/v1alpha1/types.js'
import { DEFAULT_BUILDER_CONFIG } from '../../../operator/builders/config.js'
import type { KubeObj } from '../../../operator/objects.js'
import { Reconciler, REQUEUE_WHILE_STORE_MISSING_MS } from '../../../operator/controller/reconciler.js'
import { swarmKeysOf } from '../../../operator/kube/informers.js'
import { swarm } from '../builders/fixture.js'
import { MemoryCluster } from './memory-cluster.js'

const KEY = 'ml/demo'
const silent = { info () {}, warn () {}, debug () {} }

function setup (spec: PartialSpec, cluster = new MemoryCluster()) {
  cluster.put(swarm({ replicas: 2, bootstrap: { replicas: 1 }, ...spec }) as unknown as KubeObj)
  let t = Date.parse('2026-11-22T04:00:00Z')
  const r = new Reconciler({ cache: cluster, api: cluster.api, config: DEFAULT_BUILDER_CONFIG, log: silent, clock: () => new Date(t) })
  return { cluster, r, later (ms = 60_000) { t += ms } }
}
const cond = (st: AveragingSwarmStatus | undefined, type: string) => st?.conditions?.find(c => c.type === type)
const podSpec = (c: MemoryCluster, set = 'demo-agent') => (c.get('StatefulSet', 'ml', set) as any).spec.template.spec
const hasCheckpointVolume = (c: MemoryCluster) => podSpec(c).volumes.some((v: any) => v.name === 'avs-checkpoints')
const envNames = (c: MemoryCluster) => podSpec(c).containers[0].env.map((e: any) => e.name) as string[]

test('claimTemplate: the claim is created once, with no owner reference, and never written again', async () => {
  const { cluster, r, later } = setup({ checkpoint: { volume: { claimTemplate: { size: '5Gi', storageClassName: '' } } } })
  const first = await r.reconcile(KEY)
  const calls = cluster.takeCalls()
  assert.ok(calls.includes('create PersistentVolumeClaim/demo-checkpoints'), calls.join('\n'))
  const claim = cluster.get('PersistentVolumeClaim', 'ml', 'demo-checkpoints') as any
  assert.equal(claim.metadata.ownerReferences, undefined)
  assert.deepEqual(claim.spec, { accessModes: ['ReadWriteMany'], resources: { requests: { storage: '5Gi' } }, storageClassName: '' })
  assert.ok(cluster.takeEvents().some(e => e.reason === 'Created' && /PersistentVolumeClaim demo-checkpoints .*no owner/.test(e.message)))
  assert.ok(hasCheckpointVolume(cluster), 'the pods mount it at once (a WaitForFirstConsumer class binds it for them)')
  assert.equal(cond(first.status, 'CheckpointsFailing')?.status, 'False')
  // A person resizes it: the operator leaves it as it is, and neither changes nor deletes it later.
  cluster.put({ ...claim, spec: { ...claim.spec, resources: { requests: { storage: '50Gi' } } } })
  cluster.settle()
  for (let i = 0; i < 2; i++) { later(); await r.reconcile(KEY) }
  assert.deepEqual(cluster.takeCalls().filter(c => c.includes('PersistentVolumeClaim')), [])
  assert.equal((cluster.get('PersistentVolumeClaim', 'ml', 'demo-checkpoints') as any).spec.resources.requests.storage, '50Gi')
})

test('claimTemplate: a claim of that name already on the server (the cache behind) is used, not created', async () => {
  // The claim cache has not seen it yet: only the server has it.
  const { cluster, r } = setup({ checkpoint: { volume: { claimTemplate: { size: '5Gi' } } } }, new MemoryCluster(['AveragingSwarm', 'StatefulSet', 'Service', 'ConfigMap', 'Secret', 'PodDisruptionBudget', 'Pod']))
  cluster.put({ apiVersion: 'v1', kind: 'PersistentVolumeClaim', metadata: { name: 'demo-checkpoints', namespace: 'ml' }, spec: { resources: { requests: { storage: '1Gi' } } } })
  await r.reconcile(KEY)
  const calls = cluster.takeCalls()
  assert.ok(calls.includes('get PersistentVolumeClaim/demo-checkpoints'), calls.join('\n'))
  assert.ok(!calls.some(c => c.startsWith('create ')))
})

test('a named claim that does not exist: pods without checkpoints, CheckpointsFailing ClaimNotFound with an event, looked at again; once it exists the pods get it', async () => {
  const { cluster, r, later } = setup({ checkpoint: { volume: { claimName: 'results' } }, restoreFrom: { swarm: 'old' } })
  const res = await r.reconcile(KEY)
  assert.ok(!hasCheckpointVolume(cluster))
  assert.ok(!envNames(cluster).some(n => n === 'AVS_CHECKPOINT_DIR' || n.startsWith('AVS_RESTORE_FROM')))
  const c = cond(res.status, 'CheckpointsFailing')
  assert.deepEqual([c?.status, c?.reason, c?.message], ['True', 'ClaimNotFound', 'PersistentVolumeClaim results (spec.checkpoint.volume.claimName) does not exist in namespace ml; the agents average without checkpoints until it does.'])
  assert.equal(res.requeueAfterMs !== undefined && res.requeueAfterMs <= REQUEUE_WHILE_STORE_MISSING_MS, true)
  assert.deepEqual(cluster.takeEvents().filter(e => e.type === 'Warning').map(e => e.reason), ['ClaimNotFound'])
  cluster.put({ apiVersion: 'v1', kind: 'PersistentVolumeClaim', metadata: { name: 'results', namespace: 'ml' } })
  cluster.settle()
  later()
  const after = await r.reconcile(KEY)
  assert.ok(hasCheckpointVolume(cluster), 'the template gains the claim: the pods roll onto it')
  assert.ok(envNames(cluster).includes('AVS_RESTORE_FROM_SWARM'))
  assert.equal(cond(after.status, 'CheckpointsFailing')?.status, 'False')
})

test('the claim\'s appearance reaches the swarms naming it (a user\'s claim has no swarm label)', () => {
  const swarms = [swarm({ checkpoint: { volume: { claimName: 'results' } } }, 'a'), swarm({ checkpoint: { volume: { claimName: 'other' } } }, 'b'), swarm({ checkpoint: { volume: { claimName: 'results' } } }, 'c', 'elsewhere')] as unknown as KubeObj[]
  const claim = { apiVersion: 'v1', kind: 'PersistentVolumeClaim', metadata: { name: 'results', namespace: 'ml' } }
  assert.deepEqual(swarmKeysOf('PersistentVolumeClaim', claim, () => swarms), ['ml/a'])
  assert.deepEqual(swarmKeysOf('PersistentVolumeClaim', { ...claim, metadata: { ...claim.metadata, name: 'b-checkpoints', labels: { 'averaging.swarm.io/swarm': 'b' } } }, () => swarms), ['ml/b'])
  assert.deepEqual(swarmKeysOf('ConfigMap', { ...claim, kind: 'ConfigMap' }, () => swarms), [], 'other kinds only by label')
})

test('s3: a missing Secret or key leaves the credentials out (SecretNotFound, SecretKeyNotFound); the complete Secret brings them in', async () => {
  const { cluster, r, later } = setup({ checkpoint: { s3: { bucket: 'models', secretRef: { name: 'creds' } } } })
  const s3Vars = () => envNames(cluster).filter(n => n.startsWith('AWS_') || n.startsWith('AVS_CHECKPOINT_S3_'))
  let res = await r.reconcile(KEY)
  assert.equal(cond(res.status, 'CheckpointsFailing')?.reason, 'SecretNotFound')
  assert.match(cond(res.status, 'CheckpointsFailing')?.message ?? '', /^Secret creds \(spec\.checkpoint\.s3\.secretRef\) does not exist in namespace ml;/)
  assert.deepEqual(s3Vars(), [])
  cluster.put({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'creds', namespace: 'ml' }, data: { AWS_ACCESS_KEY_ID: 'aWQ=' } })
  later(); res = await r.reconcile(KEY)
  assert.equal(cond(res.status, 'CheckpointsFailing')?.reason, 'SecretKeyNotFound')
  assert.match(cond(res.status, 'CheckpointsFailing')?.message ?? '', /has no key AWS_SECRET_ACCESS_KEY;/)
  assert.deepEqual(cluster.takeEvents().filter(e => e.type === 'Warning').map(e => e.reason), ['SecretNotFound', 'SecretKeyNotFound'])
  cluster.put({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'creds', namespace: 'ml' }, data: { AWS_ACCESS_KEY_ID: 'aWQ=', AWS_SECRET_ACCESS_KEY: 'c2VjcmV0' } })
  later(); res = await r.reconcile(KEY)
  assert.equal(cond(res.status, 'CheckpointsFailing')?.status, 'False')
  assert.deepEqual(s3Vars(), ['AVS_CHECKPOINT_S3_BUCKET', 'AVS_CHECKPOINT_S3_REGION', 'AVS_CHECKPOINT_S3_PATH_STYLE', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'])
})

test('backoffLimit: restarts beyond it make the swarm Failed, then every StatefulSet is scaled to zero, and ttlSecondsAfterFinished deletes it', async () => {
  const { cluster, r, later } = setup({ backoffLimit: 2, ttlSecondsAfterFinished: 600 })
  await r.reconcile(KEY)
  cluster.settle()
  const p = cluster.get('Pod', 'ml', 'demo-agent-0') as any
  p.status.containerStatuses = [{ name: 'agent', restartCount: 3, state: { waiting: { reason: 'CrashLoopBackOff' } }, lastState: { terminated: { exitCode: 1, message: 'agent configuration is invalid: bad\n' } } }]
  cluster.put(p)
  later()
  const stopping = await r.reconcile(KEY)
  assert.equal(stopping.status?.phase, 'Progressing')
  assert.equal(cond(stopping.status, 'Failed')?.reason, 'Stopping')
  assert.ok(!cluster.takeEvents().some(e => e.reason === 'BackoffLimitExceeded'), 'no event while the agents run')
  later()
  await r.reconcile(KEY)
  const replicas = cluster.list('StatefulSet').map((o: any) => o.spec.replicas)
  assert.deepEqual(replicas, replicas.map(() => 0))
  cluster.settle()
  later()
  const failed = await r.reconcile(KEY)
  assert.equal(failed.status?.phase, 'Failed')
  assert.equal(cond(failed.status, 'Failed')?.reason, 'BackoffLimitExceeded')
  assert.match(cond(failed.status, 'Failed')?.message ?? '', /every agent is scaled to zero\. Most: container agent of demo-agent-0 \(3 restarts\), last exit: agent configuration is invalid: bad\.$/)
  assert.ok(cluster.takeEvents().some(e => e.reason === 'BackoffLimitExceeded'))
  assert.equal(failed.requeueAfterMs, 600_000 - 2 * 60_000, 'looked at again when the TTL passes, counted from failureTime two minutes back')
  later(600_000)
  cluster.takeCalls()
  await r.reconcile(KEY)
  assert.deepEqual(cluster.takeCalls(), ['event Normal/TTLExpired', 'delete AveragingSwarm/demo'])
  assert.match(cluster.takeEvents().find(e => e.reason === 'TTLExpired')?.message ?? '', /since it failed at 2026-11-22T04:01:00Z\.$/)
})
