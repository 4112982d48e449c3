import { test } from 'node:test'
import assert from 'node:assert/strict'
import { deriveStatus, type Observed } from '../../../operator/controller/status.js'
import { statusEvents } from '../../../operator/controller/events.js'
import { swarm } from '../builders/fixture.js'
import type { KubeObj } from '../../../operator/objects.js'

const NOW = '2026-11-22T04:00:00Z'

function pod (name: string, role: string, ready: boolean, extra: any = {}): KubeObj {
  return {
    apiVersion: 'v1', kind: 'Pod',
    metadata: { name, labels: { 'averaging.swarm.io/role': role }, ...extra.metadata },
    status: { phase: 'Running', conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }], ...extra.status }
  }
}

const set = (name: string, replicas: number, updated = replicas): KubeObj => ({
  apiVersion: 'apps/v1', kind: 'StatefulSet', metadata: { name, generation: 1 }, spec: { replicas },
  status: { observedGeneration: 1, replicas, updatedReplicas: updated, currentRevision: 'a', updateRevision: 'a' }
} as KubeObj)

const agents = (n: number, ready: number) => Array.from({ length: n }, (_, i) => pod(`demo-agent-${i}`, i < 2 ? 'bootstrap' : 'agent', i < ready))
const observed = (pods: KubeObj[], extra: Partial<Observed> = {}): Observed => ({ statefulSets: [set('demo-agent', 6)], pods, bootstrapPeers: ['/dns4/x/tcp/1/p2p/y'], ...extra })
const cond = (st: any, type: string) => st.conditions.find((c: any) => c.type === type)

test('all agents Ready: phase Ready, conditions with reasons and observedGeneration, selector for /scale', () => {
  const st = deriveStatus(swarm(), observed(agents(8, 8), { progress: { roundsCompleted: 12, meanGroupSize: 3.75, lastRoundTime: NOW } }), NOW)
  assert.equal(st.phase, 'Ready')
  assert.equal(st.replicas, 8)
  assert.equal(st.readyReplicas, 8)
  assert.equal(st.roundsCompleted, 12)
  assert.equal(st.meanGroupSize, 3.75)
  assert.equal(st.selector, 'averaging.swarm.io/swarm=demo,averaging.swarm.io/role in (agent,bootstrap)')
  assert.deepEqual(cond(st, 'Ready'), { type: 'Ready', status: 'True', reason: 'AllAgentsReady', message: '8 of 8 agents are Ready; 12 averaging rounds completed.', lastTransitionTime: NOW, observedGeneration: 1 })
  assert.equal(cond(st, 'Progressing').status, 'False')
  assert.equal(cond(st, 'Degraded').status, 'False')
  assert.equal(cond(st, 'Suspended').status, 'False')
})

test('the same observations give the same status, so steady state writes nothing; transition times are kept', () => {
  const s = swarm()
  const first = deriveStatus(s, observed(agents(8, 8)), NOW)
  const again = deriveStatus({ ...s, status: first }, observed(agents(8, 8)), '2026-11-22T05:00:00Z')
  assert.deepEqual(again, first)
})

test('pods Pending count as not Ready (no "ready while pending"), phase Pending then Progressing', () => {
  assert.equal(deriveStatus(swarm(), observed(agents(8, 0)), NOW).phase, 'Pending')
  const st = deriveStatus(swarm(), observed(agents(8, 5)), NOW)
  assert.equal(st.phase, 'Progressing')
  assert.equal(cond(st, 'Progressing').reason, 'WaitingForReady')
  assert.equal(cond(st, 'Ready').message, '5 of 8 agents are Ready.')
  assert.equal(cond(deriveStatus(swarm(), observed(agents(4, 4)), NOW), 'Progressing').reason, 'ScalingUp')
})

test('crash-looping or unschedulable agents make the swarm Degraded with a reason naming them', () => {
  const crashing = pod('demo-agent-3', 'agent', false, { status: { containerStatuses: [{ state: { waiting: { reason: 'CrashLoopBackOff' } } }] } })
  const st = deriveStatus(swarm(), observed([...agents(7, 7), crashing]), NOW)
  assert.equal(st.phase, 'Degraded')
  assert.deepEqual([cond(st, 'Degraded').reason, cond(st, 'Degraded').message], ['AgentsFailing', '1 agent(s) cannot run: demo-agent-3 (CrashLoopBackOff).'])
  const pending = pod('demo-agent-7', 'agent', false, { status: { phase: 'Pending', conditions: [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message: '0/2 nodes are available: 2 Insufficient nvidia.com/gpu.' }] } })
  const st2 = deriveStatus(swarm(), observed([...agents(7, 7), pending]), NOW)
  assert.equal(cond(st2, 'Degraded').reason, 'AgentsUnschedulable')
  assert.match(cond(st2, 'Degraded').message, /Insufficient nvidia.com\/gpu/)
})

test('suspend: phase Suspended, Ready False, agents still stopping are counted', () => {
  const st = deriveStatus(swarm({ suspend: true }), observed(agents(2, 2)), NOW)
  assert.equal(st.phase, 'Suspended')
  assert.equal(cond(st, 'Suspended').message, 'spec.suspend is true; 2 agent(s) still stopping.')
  assert.equal(cond(st, 'Ready').reason, 'Suspended')
  const done = deriveStatus(swarm({ suspend: true }), observed([], { statefulSets: [set('demo-agent', 0)] }), NOW)
  assert.equal(cond(done, 'Progressing').status, 'False')
})

test('a rollout in progress is reported as Progressing/RollingUpdate', () => {
  const st = deriveStatus(swarm(), observed(agents(8, 8), { statefulSets: [set('demo-agent', 6, 3)] }), NOW)
  assert.equal(cond(st, 'Progressing').reason, 'RollingUpdate')
  assert.equal(st.phase, 'Ready', 'all agents still serve while they roll')
})

test('events: phase changes and the first averaging round are announced once', () => {
  const s = swarm()
  const ready = deriveStatus(s, observed(agents(8, 8), { progress: { roundsCompleted: 1 } }), NOW)
  const pending = deriveStatus(s, observed(agents(8, 0)), NOW)
  assert.deepEqual(statusEvents(s, pending, ready).map(e => e.reason), ['SwarmReady', 'AveragingStarted'])
  assert.deepEqual(statusEvents(s, ready, ready), [])
})
