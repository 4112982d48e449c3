/** Events worth a person's attention in kubectl describe, derived by comparing before and after. */
import type { AveragingSwarm, AveragingSwarmStatus } from '../../api/v1alpha1/types.js'
import type { EventInput } from '../kube/api.js'
import { conditionOf } from './conditions.js'
import { exitSentence, type AgentExit } from './status.js'

/**
 * Events for a status transition (phase changes, Degraded reasons, Completed, BackoffLimitExceeded,
 * CheckpointFailed or ClaimNotFound/SecretNotFound/SecretKeyNotFound when CheckpointsFailing turns True), and one AgentExits Warning
 * per exit line of failing agents ("demo-agent-2 exits: ...") that the previous Degraded
 * condition did not already carry.
 */
export function statusEvents (s: AveragingSwarm, before: AveragingSwarmStatus | undefined, after: AveragingSwarmStatus, exits: readonly AgentExit[] = []): EventInput[] {
  const out: EventInput[] = []
  const wasDegraded = conditionOf(before?.conditions, 'Degraded')
  const degradedNow = conditionOf(after.conditions, 'Degraded')
  const announced = before?.phase !== after.phase && after.phase === 'Degraded'
  for (const e of exits) {
    if (wasDegraded?.status === 'True' && wasDegraded.message.includes(`exits: ${e.line}`)) continue
    if (announced && degradedNow?.message.includes(exitSentence(e)) === true) continue
    out.push({ swarm: s, type: 'Warning', reason: 'AgentExits', message: exitSentence(e) })
  }
  if (before?.phase !== after.phase) {
    const ready = conditionOf(after.conditions, 'Ready')
    const degraded = conditionOf(after.conditions, 'Degraded')
    switch (after.phase) {
      case 'Ready': out.push({ swarm: s, type: 'Normal', reason: 'SwarmReady', message: ready?.message ?? 'All agents are Ready.' }); break
      case 'Degraded': out.push({ swarm: s, type: 'Warning', reason: degraded?.reason ?? 'Degraded', message: degraded?.message ?? 'The swarm is degraded.' }); break
      case 'Suspended': out.push({ swarm: s, type: 'Normal', reason: 'Suspended', message: 'spec.suspend is true: every agent is scaled to zero.' }); break
      case 'Succeeded': out.push({ swarm: s, type: 'Normal', reason: 'Completed', message: conditionOf(after.conditions, 'Complete')?.message ?? 'The run is complete.' }); break
      case 'Failed': out.push({ swarm: s, type: 'Warning', reason: 'BackoffLimitExceeded', message: conditionOf(after.conditions, 'Failed')?.message ?? 'The run failed.' }); break
      default: if (before?.phase === 'Suspended') out.push({ swarm: s, type: 'Normal', reason: 'Resumed', message: 'spec.suspend is false: agents are starting again.' })
    }
  }
  // On turning True, or on a new reason while True: a write failure is CheckpointFailed, a missing store its own reason (ClaimNotFound, ...).
  const failing = conditionOf(after.conditions, 'CheckpointsFailing')
  const wasFailing = conditionOf(before?.conditions, 'CheckpointsFailing')
  if (failing?.status === 'True' && (wasFailing?.status !== 'True' || wasFailing.reason !== failing.reason)) {
    out.push({ swarm: s, type: 'Warning', reason: failing.reason === 'WriteFailed' ? 'CheckpointFailed' : failing.reason, message: failing.message })
  }
  const skipped = (after.checkpoint?.skipped ?? 0) - (before?.checkpoint?.skipped ?? 0)
  if (skipped > 0) {
    out.push({ swarm: s, type: 'Warning', reason: 'CheckpointSkipped', message: `Restoring agents skipped ${skipped} checkpoint${skipped === 1 ? '' : 's'} that did not verify (torn, corrupt, or of other tensors) and used the newest one that did; their logs name each file and why.` })
  }
  if ((after.roundsCompleted ?? 0) > 0 && (before?.roundsCompleted ?? 0) === 0) {
    out.push({ swarm: s, type: 'Normal', reason: 'AveragingStarted', message: `The agents completed their first averaging round${after.meanGroupSize === undefined ? '' : ` (mean group size ${after.meanGroupSize})`}.` })
  }
  return out
}
