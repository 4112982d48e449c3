/**
 * spec.checkpoint and spec.completion in the built objects: the claim mounted where
 * AVS_CHECKPOINT_DIR points (agents and bootstrap agents, not auxiliary ones), the intervals and
 * the completion rounds through the ConfigMap, nothing at all for a swarm without the sections,
 * and every agent scaled to zero once Complete with podPolicy Delete.
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { AveragingSwarm } from '../../../api/v1alpha1/types.js'
import type { PartialSpec } from '../../../api/v1alpha1/defaults.js'
import { desiredFor, find, swarm } from './fixture.js'

const withSections = (extra: PartialSpec = {}) => swarm({
  auxiliary: { replicas: 2 },
  checkpoint: { every: 50, volume: { claimName: 'demo-ckpt' } },
  completion: { rounds: 1000 },
  ...extra
})
const sets = async (s: AveragingSwarm) => (await desiredFor(s)).objects.filter(o => o.kind === 'StatefulSet') as any[]
const agentOf = (set: any) => set.spec.template.spec.containers.find((c: any) => c.name === 'agent')
const envOf = (set: any): Record<string, any> => Object.fromEntries(agentOf(set).env.map((e: any) => [e.name, e]))

test('agents and bootstrap agents mount the claim at /var/lib/avs/checkpoints and get AVS_CHECKPOINT_DIR there', async () => {
  const all = await sets(withSections())
  const holders = all.filter(o => o.metadata.labels['averaging.swarm.io/role'] !== 'auxiliary')
  assert.deepEqual(holders.map(o => o.metadata.name).sort(), ['demo-agent', 'demo-bootstrap-0', 'demo-bootstrap-1'])
  for (const o of holders) {
    const pod = o.spec.template.spec
    assert.deepEqual(pod.volumes.filter((v: any) => v.name === 'avs-checkpoints'), [{ name: 'avs-checkpoints', persistentVolumeClaim: { claimName: 'demo-ckpt' } }], o.metadata.name)
    assert.deepEqual(agentOf(o).volumeMounts.filter((m: any) => m.name === 'avs-checkpoints'), [{ name: 'avs-checkpoints', mountPath: '/var/lib/avs/checkpoints' }])
    const env = envOf(o)
    assert.deepEqual(env.AVS_CHECKPOINT_DIR, { name: 'AVS_CHECKPOINT_DIR', value: '/var/lib/avs/checkpoints' })
    assert.deepEqual(env.AVS_CHECKPOINT_EVERY.valueFrom, { configMapKeyRef: { name: 'demo-config', key: 'AVS_CHECKPOINT_EVERY' } })
    assert.deepEqual(env.AVS_CHECKPOINT_KEEP.valueFrom, { configMapKeyRef: { name: 'demo-config', key: 'AVS_CHECKPOINT_KEEP' } })
    assert.deepEqual(env.AVS_COMPLETION_ROUNDS.valueFrom, { configMapKeyRef: { name: 'demo-config', key: 'AVS_COMPLETION_ROUNDS' } })
  }
})

test('auxiliary agents get the completion rounds but neither the claim nor AVS_CHECKPOINT_DIR', async () => {
  const aux = find((await desiredFor(withSections())).objects, 'StatefulSet', 'demo-aux')
  const env = envOf(aux)
  assert.equal(env.AVS_CHECKPOINT_DIR, undefined)
  assert.ok(aux.spec.template.spec.volumes.every((v: any) => v.name !== 'avs-checkpoints'))
  assert.ok(agentOf(aux).volumeMounts.every((m: any) => m.name !== 'avs-checkpoints'))
  assert.notEqual(env.AVS_COMPLETION_ROUNDS, undefined)
})

test('the ConfigMap carries the interval, the kept count (defaulted) and the completion rounds', async () => {
  const cm = find((await desiredFor(withSections())).objects, 'ConfigMap', 'demo-config')
  assert.equal(cm.data.AVS_CHECKPOINT_EVERY, '50')
  assert.equal(cm.data.AVS_CHECKPOINT_KEEP, '3')
  assert.equal(cm.data.AVS_COMPLETION_ROUNDS, '1000')
  const big = find((await desiredFor(withSections({ completion: { rounds: 1e12 } }))).objects, 'ConfigMap', 'demo-config')
  assert.equal(big.data.AVS_COMPLETION_ROUNDS, '1000000000000', 'no exponent notation for the agent to misread')
})

test('without the sections nothing changes: no checkpoint or completion variable, volume or ConfigMap key (an upgrade rolls no agent)', async () => {
  const d = await desiredFor(swarm({ auxiliary: { replicas: 1 } }))
  const cm = find(d.objects, 'ConfigMap', 'demo-config')
  assert.deepEqual(Object.keys(cm.data).filter(k => /CHECKPOINT|COMPLETION/.test(k)), [])
  for (const o of d.objects.filter(o => o.kind === 'StatefulSet') as any[]) {
    assert.deepEqual(Object.keys(envOf(o)).filter(k => /CHECKPOINT|COMPLETION/.test(k)), [], o.metadata.name)
    assert.ok(o.spec.template.spec.volumes.every((v: any) => v.name !== 'avs-checkpoints'))
  }
  // Changing the interval changes the config hash, so the agents roll onto it.
  const hash = async (every: number) => find((await desiredFor(withSections({ checkpoint: { every, volume: { claimName: 'c' } } }))).objects, 'StatefulSet', 'demo-agent').spec.template.metadata.annotations['averaging.swarm.io/config-hash']
  assert.notEqual(await hash(10), await hash(20))
})

test('a user volume named avs-checkpoints cannot replace the claim', async () => {
  const s = withSections({ podTemplate: { volumes: [{ name: 'avs-checkpoints', emptyDir: {} }] } })
  const vols = find((await desiredFor(s)).objects, 'StatefulSet', 'demo-agent').spec.template.spec.volumes.filter((v: any) => v.name === 'avs-checkpoints')
  assert.deepEqual(vols, [{ name: 'avs-checkpoints', persistentVolumeClaim: { claimName: 'demo-ckpt' } }])
})

test('Complete with podPolicy Delete scales every StatefulSet to zero; Keep and a swarm not yet complete keep their agents', async () => {
  const replicas = async (s: AveragingSwarm) => Object.fromEntries((await sets(s)).map(o => [o.metadata.name, o.spec.replicas]))
  const running = { 'demo-agent': 6, 'demo-aux': 2, 'demo-bootstrap-0': 1, 'demo-bootstrap-1': 1 }
  assert.deepEqual(await replicas(withSections()), running)
  const done = { completionTime: '2026-11-22T04:00:00Z' }
  assert.deepEqual(await replicas({ ...withSections(), status: done }), { 'demo-agent': 0, 'demo-aux': 0, 'demo-bootstrap-0': 0, 'demo-bootstrap-1': 0 })
  assert.deepEqual(await replicas({ ...withSections({ completion: { rounds: 10, podPolicy: 'Keep' } }), status: done }), running)
})

test('completion.duration becomes AVS_COMPLETION_DEADLINE: the swarm\'s creation time plus the duration, in RFC 3339', async () => {
  const s = swarm({ completion: { duration: '90m' } } as PartialSpec)
  const created = { ...s, metadata: { ...s.metadata, creationTimestamp: '2026-11-24T10:00:00Z' } } as AveragingSwarm
  const cm = find((await desiredFor(created)).objects, 'ConfigMap', 'demo-config') as { data: Record<string, string> }
  assert.equal(cm.data.AVS_COMPLETION_DEADLINE, '2026-11-24T11:30:00Z')
  assert.equal(cm.data.AVS_COMPLETION_ROUNDS, undefined, 'no rounds given, none set')
})
