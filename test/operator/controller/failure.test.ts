/**
 * spec.backoffLimit: restarts of agent and trainer containers summed over the swarm's pods; beyond
 * the limit the swarm is Failed (condition, phase, status.failureTime), for good, and scaled to
 * zero; a completed swarm never fails and a failed one never completes.
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { deriveStatus, type Observed } from '../../../operator/controller/status.js'
import { statusEvents } from '../../../operator/controller/events.js'
import { restartsOf } from '../../../operator/controller/failure.js'
import { roleReplicas } from '../../../operator/builders/statefulset.js'
import type { PartialSpec } from '../../../api/v1alpha1/defaults.js'
import type { AveragingSwarm } from '../../../api/v1alpha1/types.js'
import type { KubeObj } from '../../../operator/objects.js'
import { swarm } from '../builders/fixture.js'

const NOW = '2026-11-22T04:00:00Z'
const LATER = '2026-11-22T05:00:00Z'

/** A pod whose containers restarted: [name, restarts, last termination message?]. */
const pod = (name: string, containers: Array<[string, number, string?]>): KubeObj => ({
  apiVersion: 'v1', kind: 'Pod', metadata: { name, labels: { 'averaging.swarm.io/role': 'agent' } },
  status: {
    phase: 'Running',
    conditions: [{ type: 'Ready', status: 'False' }],
    containerStatuses: containers.map(([c, n, msg]) => ({
      name: c, restartCount: n, state: { waiting: { reason: 'CrashLoopBackOff' } },
      lastState: n === 0 ? {} : { terminated: { exitCode: 1, ...(msg === undefined ? {} : { message: msg }) } }
    }))
  }
})
const observed = (pods: KubeObj[]): Observed => ({ statefulSets: [], pods, bootstrapPeers: [] })
const cond = (st: any, type: string) => st.conditions.find((c: any) => c.type === type)
const job = (extra: PartialSpec = {}): AveragingSwarm => swarm({ replicas: 2, bootstrap: { replicas: 1 }, workload: { type: 'sidecar', trainer: { image: 't' } }, backoffLimit: 2, ...extra }, 'job')

test('restarts: agent and trainer containers summed over the pods; the user\'s extra containers do not count; the most-restarted named with its last exit line', () => {
  const r = restartsOf([
    pod('job-agent-0', [['agent', 1], ['trainer', 3, 'Traceback (most recent call last):\n  File "train.py", line 3\nRuntimeError: no data in /data\n'], ['log-shipper', 9]]),
    pod('job-bootstrap-0-0', [['agent', 0], ['trainer', 2]])
  ])
  assert.deepEqual(r, { total: 6, worst: { pod: 'job-agent-0', container: 'trainer', restarts: 3, line: 'RuntimeError: no data in /data' } })
  assert.deepEqual(restartsOf([pod('a', [['agent', 0]])]), { total: 0 })
  // A trainer that finished (exit 0) and was restarted by restartPolicy Always has not failed.
  const finished = pod('job-agent-1', [['trainer', 4]]) as any
  finished.status.containerStatuses[0].lastState.terminated.exitCode = 0
  assert.deepEqual(restartsOf([finished, pod('job-agent-0', [['agent', 1]])]), { total: 1, worst: { pod: 'job-agent-0', container: 'agent', restarts: 1, line: undefined } })
})

test('at the limit: Failed=False with the count; beyond it: failureTime, Failed=False Stopping until the agents are stopped, then Failed=True BackoffLimitExceeded naming the container, phase Failed, an event', () => {
  const at = deriveStatus(job(), observed([pod('job-agent-0', [['agent', 0], ['trainer', 2]])]), NOW)
  assert.deepEqual(cond(at, 'Failed'), { type: 'Failed', status: 'False', reason: 'BelowBackoffLimit', message: '2 restarts of agent and trainer containers; the swarm fails beyond spec.backoffLimit 2.', lastTransitionTime: NOW, observedGeneration: 1 })
  assert.notEqual(at.phase, 'Failed')
  assert.equal(at.failureTime, undefined)
  const stopping = deriveStatus({ ...job(), status: at }, observed([pod('job-agent-0', [['agent', 0], ['trainer', 3, 'exit: trainer crashed']])]), LATER)
  assert.equal(stopping.failureTime, LATER)
  assert.deepEqual([cond(stopping, 'Failed').status, cond(stopping, 'Failed').reason], ['False', 'Stopping'])
  assert.equal(cond(stopping, 'Failed').message, '3 restarts of agent and trainer containers exceed spec.backoffLimit 2; every agent is being scaled to zero. Most: container trainer of job-agent-0 (3 restarts), last exit: exit: trainer crashed.')
  assert.equal(stopping.phase, 'Progressing')
  assert.ok(!statusEvents(job(), at, stopping).some(e => e.reason === 'BackoffLimitExceeded'), 'no event while the agents still run')
  // The pods are gone: the message still names the container it was written with.
  const failed = deriveStatus({ ...job(), status: stopping }, observed([]), LATER)
  const c = cond(failed, 'Failed')
  assert.equal(c.status, 'True')
  assert.equal(c.reason, 'BackoffLimitExceeded')
  assert.equal(c.message, '3 restarts of agent and trainer containers exceed spec.backoffLimit 2; every agent is scaled to zero. Most: container trainer of job-agent-0 (3 restarts), last exit: exit: trainer crashed.')
  assert.equal(failed.phase, 'Failed')
  assert.equal(failed.failureTime, LATER)
  const events = statusEvents(job(), stopping, failed)
  assert.ok(events.some(e => e.type === 'Warning' && e.reason === 'BackoffLimitExceeded' && e.message === c.message), JSON.stringify(events))
})

test('Failed is sticky: the message it was written with, through the scale to zero, restarts reset by new pods, and spec edits; every role scaled to zero whatever the pod policy', () => {
  const written = deriveStatus(job(), observed([pod('job-agent-0', [['trainer', 5, 'boom']])]), NOW)
  const failed = deriveStatus({ ...job(), status: written }, observed([]), NOW)
  assert.equal(cond(failed, 'Failed').status, 'True')
  for (const [what, s, o] of [
    ['pods gone', { ...job(), status: failed }, observed([])],
    ['fresh pods without restarts', { ...job(), status: failed }, observed([pod('job-agent-0', [['trainer', 0]])])],
    ['a higher limit', { ...job({ backoffLimit: 100 }), status: failed }, observed([])],
    ['podPolicy Keep', { ...job({ completion: { rounds: 5, podPolicy: 'Keep' } }), status: failed }, observed([])]
  ] as const) {
    const st = deriveStatus(s, o, LATER)
    assert.equal(st.phase, 'Failed', what)
    assert.equal(st.failureTime, NOW, what)
    assert.deepEqual(cond(st, 'Failed'), cond(failed, 'Failed'), what)
    assert.equal(cond(st, 'Ready').reason, 'Failed', what)
    const r = roleReplicas(s)
    assert.deepEqual([r.bootstrap(0), r.agent, r.auxiliary], [0, 0, 0], what)
  }
})

test('a completed swarm never fails, a failed one never completes; no backoffLimit, no Failed condition', () => {
  const done = { ...job({ completion: { rounds: 5 } }), status: { completionTime: NOW } }
  const st = deriveStatus(done, observed([pod('job-agent-0', [['trainer', 9]])]), LATER)
  assert.equal(st.phase, 'Progressing', 'completed, its agents being stopped')
  assert.equal(st.failureTime, undefined)
  assert.equal(cond(st, 'Complete').reason, 'Stopping')
  const failed = { ...job({ completion: { rounds: 5 } }), status: { failureTime: NOW } }
  const st2 = deriveStatus(failed, { ...observed([]), progress: { roundsCompleted: 5, completion: { completed: 2, of: 2 } } }, LATER)
  assert.equal(st2.phase, 'Failed')
  assert.equal(st2.completionTime, undefined)
  const plain = deriveStatus(swarm({}, 'job'), observed([pod('job-agent-0', [['agent', 50]])]), NOW)
  assert.equal(cond(plain, 'Failed'), undefined)
  assert.notEqual(plain.phase, 'Failed')
})
