/**
 * The checkpoint and completion parts of a swarm's status, derived from what the agents report
 * (Progress) and from the status already written. Pure.
 *
 * Complete: a swarm with spec.completion is Complete once the operator has seen every Ready
 * (non-auxiliary) agent pod report averaging_completed 1, which an agent reports only once it
 * reached completion.rounds and the final checkpoint is durable (or checkpoints are off). Agents
 * that are not Ready (pending, crash-looping) are not waited for: they hold no part of the result.
 * The operator then writes status.completionTime, and from then on Complete=True is derived from
 * that field alone, never again from the agents: it stays True when the agents are scaled to zero
 * (podPolicy Delete), restart, or stop answering, and when the spec changes.
 */
import type { AveragingSwarm, CheckpointStatus } from '../../api/v1alpha1/types.js'
import type { ConditionInput } from './conditions.js'
import type { Progress } from './status.js'

/** status.completionTime: kept once set; set now when every Ready agent reports completion. */
export function completionTimeOf (s: AveragingSwarm, progress: Progress | undefined, now: string): string | undefined {
  if (s.status?.completionTime !== undefined) return s.status.completionTime
  const c = progress?.completion
  return s.spec.completion !== undefined && c !== undefined && c.of > 0 && c.completed === c.of ? now : undefined
}

const policyText = (s: AveragingSwarm): string =>
  (s.spec.completion?.podPolicy ?? 'Delete') === 'Delete' ? 'the agents are scaled to zero (completion.podPolicy Delete)' : 'the agents are kept, idle (completion.podPolicy Keep)'

/** Complete, only for a swarm with spec.completion or one that already completed. */
export function completeCondition (s: AveragingSwarm, completionTime: string | undefined, progress: Progress | undefined): ConditionInput | undefined {
  if (completionTime !== undefined) {
    const saved = s.spec.checkpoint === undefined ? ' (spec.checkpoint is unset: the result was not saved)' : ' with the final checkpoint durable'
    return { type: 'Complete', status: 'True', reason: 'RoundsReached', message: `Every Ready agent completed its rounds${saved}; ${policyText(s)}.` }
  }
  const rounds = s.spec.completion?.rounds
  if (rounds === undefined) return undefined
  const c = progress?.completion
  return {
    type: 'Complete',
    status: 'False',
    reason: 'Running',
    message: c === undefined ? `Runs until ${rounds} averaging rounds.` : `${c.completed} of ${c.of} Ready agents completed ${rounds} averaging rounds.`
  }
}

/**
 * CheckpointsFailing, only with spec.checkpoint: True when an agent's failed-write counter grew and
 * no newer checkpoint became durable since. Averaging goes on either way (Degraded is not set).
 * After an operator restart, until a scrape tells, the previous value is kept.
 */
export function checkpointsFailingCondition (s: AveragingSwarm, progress: Progress | undefined): ConditionInput | undefined {
  if (s.spec.checkpoint === undefined) return undefined
  const prev = s.status?.conditions?.find(c => c.type === 'CheckpointsFailing')
  const failing = progress?.checkpointFailing ?? prev?.status === 'True'
  return failing
    ? { type: 'CheckpointsFailing', status: 'True', reason: 'WriteFailed', message: `A checkpoint write failed (averaging_checkpoint_writes_total{outcome="failed"} grew) and no newer checkpoint is durable since; the agents' logs say why, and averaging goes on. Check that claim ${s.spec.checkpoint.volume.claimName} is bound, writable and not full.` }
    : { type: 'CheckpointsFailing', status: 'False', reason: 'NoFailures', message: 'No checkpoint write failed since the newest checkpoint.' }
}

/** status.checkpoint: the newest durable checkpoint the agents reported, where it lies in the claim. */
export function checkpointStatus (s: AveragingSwarm, progress: Progress | undefined): CheckpointStatus | undefined {
  const cp = progress?.checkpoint
  if (cp === undefined) return s.status?.checkpoint
  const claim = s.spec.checkpoint?.volume.claimName
  // The agents' folder layout (agent/checkpoint/README.md): <AVS_CHECKPOINT_DIR>/<AVS_SWARM>/round-<n>.json, the manifest naming its data file (round-<n>-<writer tag>.safetensors), AVS_SWARM being the swarm name.
  return { round: cp.round, time: cp.time, ...(claim === undefined ? {} : { location: `pvc/${claim}/${s.metadata.name}/round-${cp.round}.json` }) }
}
