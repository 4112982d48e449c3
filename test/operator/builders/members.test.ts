import { test } from 'node:test'
import assert from 'node:assert/strict'
import { desiredFor, find, swarm } from './fixture.js'
import { AGENT_ENV } from '../../../api/agent-env.js'
import { MEMBERS_MOUNT_DIR, MEMBERS_VOLUME } from '../../../operator/builders/members.js'

const podSpec = (set: any): any => set.spec.template.spec
const agentContainer = (set: any): any => podSpec(set).containers.find((c: any) => c.name === 'agent')

test('a swarm without its own group bits publishes its membership, and its members mount it and read it', async () => {
  const d = await desiredFor(swarm({ replicas: 20, auxiliary: { replicas: 2 } }))
  assert.deepEqual(find(d.objects, 'ConfigMap', 'demo-members').data, { members: '20', bootstrap: '2' })
  for (const name of ['demo-bootstrap-0', 'demo-bootstrap-1', 'demo-agent']) {
    const set = find(d.objects, 'StatefulSet', name)
    assert.deepEqual(podSpec(set).volumes.find((v: any) => v.name === MEMBERS_VOLUME), { name: MEMBERS_VOLUME, configMap: { name: 'demo-members', optional: true } }, `${name} mounts the members ConfigMap`)
    assert.deepEqual(agentContainer(set).volumeMounts.find((m: any) => m.name === MEMBERS_VOLUME), { name: MEMBERS_VOLUME, mountPath: MEMBERS_MOUNT_DIR, readOnly: true })
    assert.deepEqual(agentContainer(set).env.find((e: any) => e.name === AGENT_ENV.membersDir.name), { name: AGENT_ENV.membersDir.name, value: MEMBERS_MOUNT_DIR })
  }
  const aux = find(d.objects, 'StatefulSet', 'demo-aux')
  assert.equal(podSpec(aux).volumes.some((v: any) => v.name === MEMBERS_VOLUME), false, 'auxiliary peers hold no tensors and take no place on the grid')
  assert.equal(agentContainer(aux).env.some((e: any) => e.name === AGENT_ENV.membersDir.name), false)
})

test('scaling rewrites the membership and leaves the pod templates as they were (no pod rolls)', async () => {
  const small = await desiredFor(swarm({ replicas: 16 }))
  // The same bootstrap identities, as the operator reuses its Secret.
  const large = await desiredFor(swarm({ replicas: 64 }), { identityData: find(small.objects, 'Secret', 'demo-identity').data })
  assert.deepEqual(find(large.objects, 'ConfigMap', 'demo-members').data, { members: '64', bootstrap: '2' })
  for (const name of ['demo-bootstrap-0', 'demo-agent']) {
    assert.deepEqual(find(large.objects, 'StatefulSet', name).spec.template, find(small.objects, 'StatefulSet', name).spec.template, `${name}'s template`)
  }
  const one = await desiredFor(swarm({ replicas: 1 }))
  assert.deepEqual(find(one.objects, 'ConfigMap', 'demo-members').data, { members: '1', bootstrap: '1' }, 'one member: bootstrap agent 0 alone')
})

test('a swarm that sets initialGroupBits lays out its groups itself: no membership, no mount', async () => {
  const d = await desiredFor(swarm({ averaging: { initialGroupBits: '01' } }))
  assert.equal(d.objects.some(o => o.kind === 'ConfigMap' && o.metadata.name === 'demo-members'), false)
  const set = find(d.objects, 'StatefulSet', 'demo-agent')
  assert.equal(podSpec(set).volumes.some((v: any) => v.name === MEMBERS_VOLUME), false)
  assert.equal(agentContainer(set).env.some((e: any) => e.name === AGENT_ENV.membersDir.name), false)
})
