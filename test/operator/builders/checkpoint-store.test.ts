/**
 * spec.checkpoint's stores (a named claim, a claim from a template, an S3 bucket), spec.restoreFrom
 * and completion.onTrainerExit in the built pods: exactly the agent's variables (api/agent-env.ts),
 * for exactly the roles that write checkpoints, and nothing of a store that does not exist yet.
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { AveragingSwarm } from '../../../api/v1alpha1/types.js'
import type { PartialSpec } from '../../../api/v1alpha1/defaults.js'
import { buildCheckpointClaim, checkpointClaimName, checkpointLocation, storeName } from '../../../operator/builders/checkpoint-store.js'
import { desiredFor, swarm } from './fixture.js'

const S3 = { bucket: 'models', endpoint: 'http://minio.storage:9000', prefix: 'team-a/runs', forcePathStyle: true, secretRef: { name: 'creds' } }
const sets = async (s: AveragingSwarm, missing = false) => (await desiredFor(s, { checkpointStoreMissing: missing })).objects.filter(o => o.kind === 'StatefulSet') as any[]
const agentOf = (set: any) => set.spec.template.spec.containers.find((c: any) => c.name === 'agent')
const envOf = (set: any): Record<string, any> => Object.fromEntries(agentOf(set).env.map((e: any) => [e.name, e]))
const role = (set: any): string => set.metadata.labels['averaging.swarm.io/role']
const withAux = (spec: PartialSpec) => swarm({ auxiliary: { replicas: 1 }, ...spec })

test('s3: writing roles get the bucket\'s variables and the credentials from the Secret; no volume, no AVS_CHECKPOINT_DIR; auxiliary agents nothing', async () => {
  for (const set of await sets(withAux({ checkpoint: { s3: { ...S3, secretRef: { name: 'creds', sessionTokenKey: 'token' } } } }))) {
    const env = envOf(set)
    const names = Object.keys(env).filter(n => n.startsWith('AVS_CHECKPOINT_S3_') || n.startsWith('AWS_') || n === 'AVS_CHECKPOINT_DIR')
    assert.ok(!set.spec.template.spec.volumes.some((v: any) => v.name === 'avs-checkpoints'), set.metadata.name)
    if (role(set) === 'auxiliary') { assert.deepEqual(names, [], set.metadata.name); continue }
    assert.deepEqual(names, ['AVS_CHECKPOINT_S3_BUCKET', 'AVS_CHECKPOINT_S3_ENDPOINT', 'AVS_CHECKPOINT_S3_REGION', 'AVS_CHECKPOINT_S3_PREFIX', 'AVS_CHECKPOINT_S3_PATH_STYLE', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN'])
    assert.equal(env.AVS_CHECKPOINT_S3_BUCKET.value, 'models')
    assert.equal(env.AVS_CHECKPOINT_S3_ENDPOINT.value, 'http://minio.storage:9000')
    assert.equal(env.AVS_CHECKPOINT_S3_REGION.value, 'us-east-1')
    assert.equal(env.AVS_CHECKPOINT_S3_PREFIX.value, 'team-a/runs')
    assert.equal(env.AVS_CHECKPOINT_S3_PATH_STYLE.value, 'true')
    assert.deepEqual(env.AWS_ACCESS_KEY_ID.valueFrom, { secretKeyRef: { name: 'creds', key: 'AWS_ACCESS_KEY_ID' } })
    assert.deepEqual(env.AWS_SECRET_ACCESS_KEY.valueFrom, { secretKeyRef: { name: 'creds', key: 'AWS_SECRET_ACCESS_KEY' } })
    assert.deepEqual(env.AWS_SESSION_TOKEN.valueFrom, { secretKeyRef: { name: 'creds', key: 'token', optional: true } })
  }
  // Defaults: no endpoint or prefix variable, path style false, no session token.
  const env = envOf((await sets(swarm({ checkpoint: { s3: { bucket: 'models', secretRef: { name: 'creds' } } } })))[0])
  assert.equal(env.AVS_CHECKPOINT_S3_ENDPOINT, undefined)
  assert.equal(env.AVS_CHECKPOINT_S3_PREFIX, undefined)
  assert.equal(env.AVS_CHECKPOINT_S3_PATH_STYLE.value, 'false')
  assert.equal(env.AWS_SESSION_TOKEN, undefined)
})

test('a user\'s podTemplate.env cannot override the credentials', async () => {
  const env = agentOf((await sets(swarm({ checkpoint: { s3: S3 }, podTemplate: { env: [{ name: 'AWS_ACCESS_KEY_ID', value: 'mine' }] } })))[0]).env
  assert.deepEqual(env.filter((e: any) => e.name === 'AWS_ACCESS_KEY_ID'), [{ name: 'AWS_ACCESS_KEY_ID', valueFrom: { secretKeyRef: { name: 'creds', key: 'AWS_ACCESS_KEY_ID' } } }])
})

test('claimTemplate: the pods mount <swarm>-checkpoints; the claim has the swarm\'s labels, the template\'s fields, and no owner reference', async () => {
  const s = swarm({ checkpoint: { volume: { claimTemplate: { size: '20Gi', storageClassName: 'nfs' } } } })
  assert.equal(checkpointClaimName(s), 'demo-checkpoints')
  for (const set of await sets(s)) {
    assert.deepEqual(set.spec.template.spec.volumes.filter((v: any) => v.name === 'avs-checkpoints'), [{ name: 'avs-checkpoints', persistentVolumeClaim: { claimName: 'demo-checkpoints' } }])
    assert.equal(envOf(set).AVS_CHECKPOINT_DIR.value, '/var/lib/avs/checkpoints')
  }
  const claim = buildCheckpointClaim(s) as any
  assert.equal(claim.metadata.ownerReferences, undefined, 'deleting the swarm must not delete the checkpoints')
  assert.equal(claim.metadata.labels['averaging.swarm.io/swarm'], 'demo')
  assert.deepEqual(claim.spec, { accessModes: ['ReadWriteMany'], resources: { requests: { storage: '20Gi' } }, storageClassName: 'nfs' })
  assert.equal(buildCheckpointClaim(swarm({ checkpoint: { volume: { claimName: 'x' } } })), undefined, 'a named claim is never made')
  assert.ok(!(await desiredFor(s)).objects.some(o => o.kind === 'PersistentVolumeClaim'), 'not among the applied (and pruned) objects')
})

test('a missing store: no checkpoint volume, mount or variable (nor restoreFrom), so the pods start and average; the rest of the pod is unchanged', async () => {
  for (const checkpoint of [{ volume: { claimName: 'ckpt' } }, { s3: S3 }]) {
    const s = swarm({ checkpoint, restoreFrom: { swarm: 'old' } })
    const [ok, missing] = [await sets(s), await sets(s, true)]
    for (const set of missing) {
      const names = agentOf(set).env.map((e: any) => e.name)
      assert.ok(!names.some((n: string) => /^(AVS_CHECKPOINT_DIR|AVS_CHECKPOINT_S3_|AWS_|AVS_RESTORE_FROM_)/.test(n)), names.join(','))
      assert.ok(!set.spec.template.spec.volumes.some((v: any) => v.name === 'avs-checkpoints'))
      assert.ok(!agentOf(set).volumeMounts.some((m: any) => m.name === 'avs-checkpoints'))
    }
    assert.notDeepEqual(ok[0].spec.template, missing[0].spec.template, 'once the store exists the template changes, which rolls the pods')
  }
})

test('restoreFrom: AVS_RESTORE_FROM_SWARM and _ROUND for the writing roles only', async () => {
  for (const set of await sets(withAux({ checkpoint: { volume: { claimName: 'ckpt' } }, restoreFrom: { swarm: 'run-1', round: 4200 } }))) {
    const env = envOf(set)
    if (role(set) === 'auxiliary') { assert.equal(env.AVS_RESTORE_FROM_SWARM, undefined); continue }
    assert.deepEqual([env.AVS_RESTORE_FROM_SWARM.value, env.AVS_RESTORE_FROM_ROUND.value], ['run-1', '4200'])
  }
  const env = envOf((await sets(swarm({ checkpoint: { volume: { claimName: 'ckpt' } }, restoreFrom: { swarm: 'run-1' } })))[0])
  assert.equal(env.AVS_RESTORE_FROM_ROUND, undefined, 'no round: the newest complete checkpoint')
})

test('completion.onTrainerExit: AVS_COMPLETION_ON_TRAINER_EXIT=true for every role; false or absent sets nothing (no roll for existing swarms)', async () => {
  const sidecar = { type: 'sidecar' as const, trainer: { image: 'trainer:1' } }
  for (const set of await sets(withAux({ workload: sidecar, completion: { onTrainerExit: true } }))) {
    assert.equal(envOf(set).AVS_COMPLETION_ON_TRAINER_EXIT?.value, 'true', set.metadata.name)
  }
  for (const set of await sets(withAux({ workload: sidecar, completion: { rounds: 5 } }))) assert.equal(envOf(set).AVS_COMPLETION_ON_TRAINER_EXIT, undefined)
})

test('checkpoint locations and store names: pvc/<claim>/..., s3://<bucket>/<prefix>/... without a doubled slash when there is no prefix', () => {
  assert.equal(checkpointLocation(swarm({ checkpoint: { volume: { claimName: 'ckpt' } } }), 7), 'pvc/ckpt/demo/round-7.json')
  assert.equal(checkpointLocation(swarm({ checkpoint: { volume: { claimTemplate: { size: '1Gi' } } } }), 7), 'pvc/demo-checkpoints/demo/round-7.json')
  assert.equal(checkpointLocation(swarm({ checkpoint: { s3: S3 } }), 7), 's3://models/team-a/runs/demo/round-7.json')
  assert.equal(checkpointLocation(swarm({ checkpoint: { s3: { bucket: 'models', secretRef: { name: 'c' } } } }), 7), 's3://models/demo/round-7.json')
  assert.equal(checkpointLocation(swarm({}), 7), undefined)
  assert.equal(storeName(swarm({ checkpoint: { s3: S3 } })), 'bucket models')
  assert.equal(storeName(swarm({ checkpoint: { volume: { claimName: 'ckpt' } } })), 'claim ckpt')
})
