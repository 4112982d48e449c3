import { test } from 'node:test'
import assert from 'node:assert/strict'
import { desiredFor, find, swarm } from './fixture.js'
import { ANNOTATION_CONFIG_HASH } from '../../../operator/builders/names.js'

test('a swarm owns a Service, Secret, its config and members ConfigMaps, one StatefulSet per bootstrap agent, the agents\' StatefulSet and a PDB', async () => {
  const d = await desiredFor(swarm())
  assert.deepEqual(d.objects.map(o => `${o.kind}/${o.metadata.name}`), [
    'Service/demo-agents', 'Secret/demo-identity', 'ConfigMap/demo-config', 'ConfigMap/demo-members',
    'StatefulSet/demo-bootstrap-0', 'StatefulSet/demo-bootstrap-1', 'StatefulSet/demo-agent', 'PodDisruptionBudget/demo'
  ])
  for (const o of d.objects) {
    const refs = o.metadata.ownerReferences as any[]
    assert.equal(refs.length, 1, `${o.kind} has one owner`)
    assert.deepEqual(refs[0], { apiVersion: 'averaging.swarm.io/v1alpha1', kind: 'AveragingSwarm', name: 'demo', uid: swarm().metadata.uid, controller: true, blockOwnerDeletion: true })
    assert.equal(o.metadata.namespace, 'ml')
    assert.equal(o.metadata.labels?.['averaging.swarm.io/swarm'], 'demo')
  }
  assert.equal(d.bootstrapPeers.length, 2)
})

test('replicas are split: bootstrap agents count toward spec.replicas', async () => {
  const d = await desiredFor(swarm({ replicas: 8 }))
  assert.equal(find(d.objects, 'StatefulSet', 'demo-bootstrap-0').spec.replicas, 1)
  assert.equal(find(d.objects, 'StatefulSet', 'demo-bootstrap-1').spec.replicas, 1)
  assert.equal(find(d.objects, 'StatefulSet', 'demo-agent').spec.replicas, 6)
  const one = await desiredFor(swarm({ replicas: 1 }))
  assert.equal(find(one.objects, 'StatefulSet', 'demo-bootstrap-1').spec.replicas, 0, 'replicas 1 runs only bootstrap agent 0')
  assert.equal(find(one.objects, 'StatefulSet', 'demo-agent').spec.replicas, 0)
})

test('suspend scales every StatefulSet to zero and changes no pod template (resuming rolls nothing)', async () => {
  const live = await desiredFor(swarm({ auxiliary: { replicas: 2 } }))
  const s = swarm({ auxiliary: { replicas: 2 }, suspend: true })
  const identityData = find(live.objects, 'Secret', 'demo-identity').data
  const { buildDesired } = await import('../../../operator/builders/desired.js')
  const { DEFAULT_BUILDER_CONFIG } = await import('../../../operator/builders/config.js')
  const susp = buildDesired(s, { config: DEFAULT_BUILDER_CONFIG, identityData, podMonitorAvailable: false })
  const liveSets = live.objects.filter(o => o.kind === 'StatefulSet') as any[]
  const suspSets = susp.objects.filter(o => o.kind === 'StatefulSet') as any[]
  assert.equal(suspSets.length, 4)
  for (const [i, set] of suspSets.entries()) {
    assert.equal(set.spec.replicas, 0, set.metadata.name)
    assert.deepEqual(set.spec.template, liveSets[i].spec.template)
  }
})

test('scaling changes only replicas; an averaging change changes the pods\' config hash so they roll', async () => {
  const a = await desiredFor(swarm({ replicas: 8 }))
  const identityData = find(a.objects, 'Secret', 'demo-identity').data
  const { buildDesired } = await import('../../../operator/builders/desired.js')
  const { DEFAULT_BUILDER_CONFIG } = await import('../../../operator/builders/config.js')
  const build = (spec: object) => buildDesired(swarm(spec), { config: DEFAULT_BUILDER_CONFIG, identityData, podMonitorAvailable: false })
  const scaled = build({ replicas: 16 })
  assert.deepEqual(find(scaled.objects, 'StatefulSet', 'demo-agent').spec.template, find(a.objects, 'StatefulSet', 'demo-agent').spec.template)
  assert.equal(find(scaled.objects, 'StatefulSet', 'demo-agent').spec.replicas, 14)
  const changed = build({ averaging: { targetGroupSize: 8 } })
  const h = (d: typeof a) => find(d.objects, 'StatefulSet', 'demo-agent').spec.template.metadata.annotations[ANNOTATION_CONFIG_HASH]
  assert.notEqual(h(changed), h(a))
  assert.equal(find(changed.objects, 'ConfigMap', 'demo-config').data.AVS_TARGET_GROUP_SIZE, '8')
})

test('the PodMonitor is built only when its CRD exists and the spec wants it', async () => {
  const kinds = async (spec: object, available: boolean) => (await desiredFor(swarm(spec), { podMonitorAvailable: available })).objects.map(o => o.kind)
  assert.ok((await kinds({}, true)).includes('PodMonitor'))
  assert.ok(!(await kinds({}, false)).includes('PodMonitor'))
  assert.ok(!(await kinds({ metrics: { podMonitor: false } }, true)).includes('PodMonitor'))
})

test('the ConfigMap carries the averaging parameters under the agent\'s variable names, prefix defaulted', async () => {
  const d = await desiredFor(swarm({ averaging: { compression: 'float16', bandwidth: 100, dataThreads: 2 } }))
  const cm = find(d.objects, 'ConfigMap', 'demo-config')
  assert.deepEqual(cm.data, {
    AVS_PREFIX: 'ml_demo', AVS_TARGET_GROUP_SIZE: '4', AVS_MIN_GROUP_SIZE: '2', AVS_INITIAL_GROUP_BITS: '',
    AVS_AVERAGING_EXPIRATION: '15s', AVS_REQUEST_TIMEOUT: '3s', AVS_ALLREDUCE_TIMEOUT: '60s', AVS_PART_SIZE_BYTES: '65536',
    AVS_AVERAGING_ALPHA: '1', AVS_COMPRESSION: 'float16', AVS_PERIOD: '30s', AVS_BANDWIDTH: '100', AVS_DATA_THREADS: '2'
  })
})

test('the headless Service publishes not-ready agents, so peers resolve before they are Ready', async () => {
  const svc = find((await desiredFor(swarm())).objects, 'Service', 'demo-agents')
  assert.equal(svc.spec.clusterIP, 'None')
  assert.equal(svc.spec.publishNotReadyAddresses, true)
  assert.deepEqual(svc.spec.ports.map((p: any) => [p.name, p.port]), [['p2p', 31337], ['metrics', 9400]])
})

test('the PDB covers bootstrap and regular agents, not auxiliary ones', async () => {
  const pdb = find((await desiredFor(swarm())).objects, 'PodDisruptionBudget', 'demo')
  assert.deepEqual(pdb.spec.selector.matchExpressions, [{ key: 'averaging.swarm.io/role', operator: 'In', values: ['agent', 'bootstrap'] }])
})

test('a generated PSK Secret is built only when asked for', async () => {
  const s = swarm({ network: { privateNetworkSecret: { name: 'demo-psk', generate: true } } })
  assert.ok(!(await desiredFor(s)).objects.some(o => o.metadata.name === 'demo-psk'))
  const d = await desiredFor(s, { pskData: { 'swarm.key': 'eA==' } })
  assert.equal(find(d.objects, 'Secret', 'demo-psk').data['swarm.key'], 'eA==')
})

test('every StatefulSet selector matches its own pod template and no other StatefulSet\'s', async () => {
  const sets = (await desiredFor(swarm({ auxiliary: { replicas: 1 } }))).objects.filter(o => o.kind === 'StatefulSet') as any[]
  const matches = (sel: Record<string, string>, labels: Record<string, string>) => Object.entries(sel).every(([k, v]) => labels[k] === v)
  for (const a of sets) {
    for (const b of sets) {
      assert.equal(matches(a.spec.selector.matchLabels, b.spec.template.metadata.labels), a === b, `${a.metadata.name} selector vs ${b.metadata.name} pods`)
    }
  }
})
