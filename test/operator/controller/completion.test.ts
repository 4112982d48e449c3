/**
 * Complete, Succeeded, status.checkpoint and CheckpointsFailing derived from what the agents
 * report (Progress) and from the status already written: Complete only once every Ready agent
 * reported completion, then sticky on status.completionTime whatever the agents say after.
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { deriveStatus, type Observed, type Progress } from '../../../operator/controller/status.js'
import { statusEvents } from '../../../operator/controller/events.js'
import type { PartialSpec } from '../../../api/v1alpha1/defaults.js'
import type { AveragingSwarm } from '../../../api/v1alpha1/types.js'
import type { KubeObj } from '../../../operator/objects.js'
import { swarm } from '../builders/fixture.js'

const NOW = '2026-11-22T04:00:00Z'
const LATER = '2026-11-22T05:00:00Z'
const LATER2 = '2026-11-22T05:00:30Z'

const pod = (name: string, role: string): KubeObj => ({
  apiVersion: 'v1', kind: 'Pod', metadata: { name, labels: { 'averaging.swarm.io/role': role } },
  status: { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] }
})
const agents = (n: number) => Array.from({ length: n }, (_, i) => pod(`job-agent-${i}`, i < 2 ? 'bootstrap' : 'agent'))
const set = (replicas: number): KubeObj => ({
  apiVersion: 'apps/v1', kind: 'StatefulSet', metadata: { name: 'job-agent', generation: 1 }, spec: { replicas },
  status: { observedGeneration: 1, replicas, updatedReplicas: replicas, currentRevision: 'a', updateRevision: 'a' }
} as KubeObj)
const observed = (pods: KubeObj[], progress?: Progress): Observed => ({ statefulSets: [set(pods.length)], pods, bootstrapPeers: [], ...(progress === undefined ? {} : { progress }) })
const cond = (st: any, type: string) => st.conditions.find((c: any) => c.type === type)
const job = (extra: PartialSpec = {}): AveragingSwarm => swarm({ checkpoint: { volume: { claimName: 'ckpt' } }, completion: { rounds: 500 }, ...extra }, 'job')
const progress = (completed: number, of: number, extra: Partial<Progress> = {}): Progress => ({ roundsCompleted: 500, completion: { completed, of }, ...extra })

test('not every Ready agent completed: Complete=False with the count, phase Ready, no completionTime', () => {
  const st = deriveStatus(job(), observed(agents(8), progress(7, 8)), NOW)
  assert.deepEqual(cond(st, 'Complete'), { type: 'Complete', status: 'False', reason: 'Running', message: '7 of 8 Ready agents completed their run (at 500 averaging rounds).', lastTransitionTime: NOW, observedGeneration: 1 })
  assert.equal(st.phase, 'Ready')
  assert.equal(st.completionTime, undefined)
  assert.equal(cond(deriveStatus(job(), observed(agents(8)), NOW), 'Complete').message, 'Runs until 500 averaging rounds.')
  assert.equal(deriveStatus(job(), observed(agents(8), progress(0, 0)), NOW).completionTime, undefined, 'no Ready agent: nothing to call complete')
})

test('every Ready agent completed: completionTime now, Complete=False Stopping and phase Progressing until the agents are stopped, then Complete=True, phase Succeeded, a Completed event', () => {
  const before = deriveStatus(job(), observed(agents(8), progress(7, 8)), NOW)
  const stopping = deriveStatus({ ...job(), status: before }, observed(agents(8), progress(8, 8)), LATER)
  assert.equal(stopping.completionTime, LATER)
  assert.deepEqual([cond(stopping, 'Complete').status, cond(stopping, 'Complete').reason], ['False', 'Stopping'])
  assert.match(cond(stopping, 'Complete').message, /^Every Ready agent completed its 500 rounds with the final checkpoint durable; the agents are being scaled to zero \(completion\.podPolicy Delete\)\.$/)
  assert.equal(stopping.phase, 'Progressing')
  assert.equal(cond(stopping, 'Progressing').reason, 'ScalingDown')
  assert.equal(cond(stopping, 'Ready').message, 'The run is complete; its agents are being scaled to zero (completion.podPolicy Delete).')
  assert.deepEqual(statusEvents(job(), before, stopping).map(e => `${e.type}/${e.reason}`), [], 'no Completed event while the agents still run')
  // Scaled to zero but a pod not yet terminating: still Stopping. Terminating pods do not hold it back.
  const s = { ...job(), status: stopping }
  assert.equal(cond(deriveStatus(s, { statefulSets: [set(0)], pods: agents(1), bootstrapPeers: [] }, LATER), 'Complete').status, 'False')
  assert.equal(cond(deriveStatus(s, { statefulSets: [set(1)], pods: [], bootstrapPeers: [] }, LATER), 'Complete').status, 'False')
  const terminating = agents(8).map(p => ({ ...p, metadata: { ...p.metadata, deletionTimestamp: LATER } }))
  const st = deriveStatus(s, { statefulSets: [set(0)], pods: terminating, bootstrapPeers: [] }, LATER2)
  assert.equal(cond(st, 'Complete').status, 'True')
  assert.equal(cond(st, 'Complete').reason, 'RoundsReached')
  assert.equal(cond(st, 'Complete').lastTransitionTime, LATER2)
  assert.equal(st.completionTime, LATER, 'when the agents completed, not when they stopped')
  assert.equal(st.phase, 'Succeeded')
  assert.equal(cond(st, 'Ready').message, 'The run is complete; its agents are scaled to zero (completion.podPolicy Delete).')
  const events = statusEvents(job(), stopping, st)
  assert.deepEqual(events.map(e => `${e.type}/${e.reason}`), ['Normal/Completed'])
  assert.match(events[0].message, /final checkpoint durable; the agents are scaled to zero \(completion\.podPolicy Delete\)\.$/)
})

test('Complete is sticky: once True, agents that restart, stop answering or are gone change nothing', () => {
  const written = deriveStatus(job(), observed(agents(8), progress(8, 8)), NOW)
  const done = deriveStatus({ ...job(), status: written }, observed([]), NOW)
  assert.equal(cond(done, 'Complete').status, 'True')
  const s = { ...job(), status: done }
  for (const [what, o] of [
    ['an agent restarted and reports 0', observed(agents(8), progress(7, 8))],
    ['no scrape since the operator restarted', observed(agents(8))],
    ['every agent scaled to zero', observed([])]
  ] as const) {
    const st = deriveStatus(s, o, LATER)
    assert.equal(st.completionTime, NOW, what)
    assert.equal(cond(st, 'Complete').status, 'True', what)
    assert.equal(cond(st, 'Complete').lastTransitionTime, NOW, what)
    assert.equal(st.phase, 'Succeeded', what)
  }
  // Even a spec edit (more rounds) does not reopen a finished run.
  const edited = { ...job({ completion: { rounds: 900 } }), status: done }
  assert.equal(deriveStatus(edited, observed(agents(8), progress(0, 8)), LATER).phase, 'Succeeded')
})

test('Complete with podPolicy Delete and the agents gone: Ready=False Completed, nothing Progressing, nothing Degraded; Keep stays Ready', () => {
  const s = { ...job(), status: { completionTime: NOW } }
  const st = deriveStatus(s, { statefulSets: [set(0)], pods: [], bootstrapPeers: [] }, LATER)
  assert.equal(cond(st, 'Ready').reason, 'Completed')
  assert.equal(cond(st, 'Progressing').status, 'False')
  assert.equal(cond(st, 'Progressing').message, 'All agents are stopped.')
  assert.equal(cond(st, 'Degraded').status, 'False')
  assert.equal(st.phase, 'Succeeded')
  const kept = deriveStatus({ ...job({ completion: { rounds: 500, podPolicy: 'Keep' } }), status: { completionTime: NOW } }, observed(agents(8)), LATER)
  assert.equal(cond(kept, 'Ready').status, 'True')
  assert.equal(kept.phase, 'Succeeded')
  assert.match(cond(kept, 'Complete').message, /kept, idle \(completion\.podPolicy Keep\)/)
})

test('without spec.completion there is no Complete condition, whatever the agents report', () => {
  const st = deriveStatus(swarm({}, 'job'), observed(agents(8), progress(8, 8)), NOW)
  assert.equal(cond(st, 'Complete'), undefined)
  assert.equal(cond(st, 'CheckpointsFailing'), undefined)
  assert.equal(st.completionTime, undefined)
  assert.equal(st.phase, 'Ready')
  assert.ok(st.conditions!.length <= 8, 'the schema allows 8 conditions')
})

test('status.checkpoint: the newest checkpoint, located in the claim under the swarm\'s name; kept while no scrape says more', () => {
  const st = deriveStatus(job(), observed(agents(8), progress(0, 8, { checkpoint: { round: 200, time: NOW } })), NOW)
  assert.deepEqual(st.checkpoint, { round: 200, time: NOW, location: 'pvc/ckpt/job/round-200.json' })
  assert.deepEqual(deriveStatus({ ...job(), status: st }, observed(agents(8)), LATER).checkpoint, st.checkpoint)
})

test('CheckpointsFailing: True with a CheckpointFailed event when writes fail, kept over an operator restart, False once a newer checkpoint is durable', () => {
  const ok = deriveStatus(job(), observed(agents(8), progress(0, 8, { checkpointFailing: false })), NOW)
  assert.equal(cond(ok, 'CheckpointsFailing').status, 'False')
  const failing = deriveStatus({ ...job(), status: ok }, observed(agents(8), progress(0, 8, { checkpointFailing: true, checkpointFailures: 2 })), LATER)
  assert.equal(cond(failing, 'CheckpointsFailing').status, 'True')
  assert.equal(cond(failing, 'CheckpointsFailing').reason, 'WriteFailed')
  assert.match(cond(failing, 'CheckpointsFailing').message, /claim ckpt is bound, writable and not full/)
  assert.equal(cond(failing, 'Degraded').status, 'False', 'averaging goes on: not Degraded')
  assert.equal(failing.phase, 'Ready')
  assert.deepEqual(statusEvents(job(), ok, failing).map(e => `${e.type}/${e.reason}`), ['Warning/CheckpointFailed'])
  assert.deepEqual(statusEvents(job(), failing, failing), [], 'one event per episode')
  assert.equal(cond(deriveStatus({ ...job(), status: failing }, observed(agents(8)), LATER), 'CheckpointsFailing').status, 'True', 'no scrape yet: kept')
  assert.equal(cond(deriveStatus({ ...job(), status: failing }, observed(agents(8), progress(0, 8, { checkpointFailing: false })), LATER), 'CheckpointsFailing').status, 'False')
})

test('Complete says which criterion ended the run: rounds, duration or the trainers\' exit; Running lists the criteria set', () => {
  const sidecar = { type: 'sidecar' as const, trainer: { image: 't' } }
  const created = { metadata: { name: 'job', namespace: 'ml', uid: 'u', generation: 1, creationTimestamp: '2026-11-22T02:00:00Z' } }
  const byDuration = { ...job({ completion: { rounds: 500, duration: '1h' } }), ...created }
  const st = deriveStatus(byDuration, observed([], { ...progress(2, 2), roundsCompleted: 120 }), NOW)
  assert.equal(cond(st, 'Complete').reason, 'DurationReached')
  assert.match(cond(st, 'Complete').message, /^Every Ready agent ran for its duration 1h with the final checkpoint durable/)
  const byTrainer = deriveStatus(job({ workload: sidecar, completion: { onTrainerExit: true } }), observed([], { ...progress(2, 2), roundsCompleted: 17 }), NOW)
  assert.equal(cond(byTrainer, 'Complete').reason, 'TrainerFinished')
  assert.match(cond(byTrainer, 'Complete').message, /^Every Ready agent finished with its trainer/)
  const running = deriveStatus(job({ workload: sidecar, completion: { rounds: 500, duration: '2h', onTrainerExit: true } }), observed(agents(2)), NOW)
  assert.equal(cond(running, 'Complete').message, 'Runs until 500 averaging rounds, 2h after creation or its trainer\'s exit, whichever comes first.')
  assert.equal(cond(deriveStatus(job({ workload: sidecar, completion: { onTrainerExit: true } }), observed(agents(2)), NOW), 'Complete').message, 'Runs until its trainer\'s exit.')
})

test('CheckpointsFailing for a missing store: True with its reason and sentence, an event of that reason, False once it exists; an S3 write failure names the bucket', () => {
  const problem = { reason: 'ClaimNotFound' as const, message: 'PersistentVolumeClaim ckpt (spec.checkpoint.volume.claimName) does not exist in namespace ml; the agents average without checkpoints until it does.' }
  const missing = deriveStatus(job(), { ...observed(agents(8)), checkpointProblem: problem }, NOW)
  assert.deepEqual([cond(missing, 'CheckpointsFailing').status, cond(missing, 'CheckpointsFailing').reason, cond(missing, 'CheckpointsFailing').message], ['True', 'ClaimNotFound', problem.message])
  assert.equal(missing.phase, 'Ready', 'averaging goes on')
  assert.deepEqual(statusEvents(job(), undefined, missing).filter(e => e.type === 'Warning').map(e => `${e.reason}: ${e.message}`), [`ClaimNotFound: ${problem.message}`])
  const found = deriveStatus({ ...job(), status: missing }, observed(agents(8)), LATER)
  assert.equal(cond(found, 'CheckpointsFailing').status, 'False', 'a missing claim is not kept over an operator restart like a write failure')
  const s3 = job({ checkpoint: { s3: { bucket: 'models', secretRef: { name: 'creds' } } } })
  const failing = deriveStatus(s3, observed(agents(8), progress(0, 8, { checkpointFailing: true })), NOW)
  assert.match(cond(failing, 'CheckpointsFailing').message, /Check that bucket models exists and that the credentials in Secret creds may write to it\.$/)
  const written = deriveStatus(s3, observed(agents(8), progress(0, 8, { checkpoint: { round: 40, time: NOW } })), NOW)
  assert.equal(written.checkpoint?.location, 's3://models/job/round-40.json')
})

test('checkpoints skipped by restoring agents: counted in status.checkpoint.skipped (kept over an operator restart), a CheckpointSkipped event when the count grows', async () => {
  const { FinishTracker, agentFacts } = await import('../../../operator/controller/checkpoint-progress.js')
  const tracker = new FinishTracker()
  const facts = (skipped: number) => agentFacts([{ name: 'averaging_checkpoint_skipped_total', labels: { swarm: 'job' }, value: skipped }])
  // A pod's first scrape counts: its agent skipped them while restoring, at its start, before any scrape.
  tracker.observe(new Map([['a', facts(2)], ['b', facts(0)]]))
  assert.equal(tracker.skippedCheckpoints, 2)
  tracker.observe(new Map([['a', facts(2)], ['b', facts(1)]]))
  assert.equal(tracker.skippedCheckpoints, 3, 'only growth counts')
  const cp = { round: 4, time: NOW }
  const before = deriveStatus(job(), observed(agents(4), progress(0, 4, { checkpoint: cp })), NOW)
  assert.equal(before.checkpoint?.skipped, undefined)
  const after = deriveStatus({ ...job(), status: before }, observed(agents(4), progress(0, 4, { checkpoint: cp, checkpointsSkipped: 3 })), NOW)
  assert.equal(after.checkpoint?.skipped, 3)
  const events = statusEvents(job(), before, after).filter(e => e.reason === 'CheckpointSkipped')
  assert.deepEqual(events.map(e => `${e.type}: ${e.message}`), ['Warning: Restoring agents skipped 3 checkpoints that did not verify (torn, corrupt, or of other tensors) and used the newest one that did; their logs name each file and why.'])
  assert.deepEqual(statusEvents(job(), after, after).filter(e => e.reason === 'CheckpointSkipped'), [], 'one event per growth')
  // After an operator restart the tracker starts from 0; the status keeps the larger count, and no event repeats.
  const restarted = deriveStatus({ ...job(), status: after }, observed(agents(4), progress(0, 4, { checkpoint: cp, checkpointsSkipped: 1 })), NOW)
  assert.equal(restarted.checkpoint?.skipped, 3)
})
