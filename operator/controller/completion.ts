/**
 * The checkpoint and completion parts of a swarm's status, derived from what the agents report
 * (Progress) and from the status already written. Pure.
 *
 * Complete: a swarm with spec.completion is Complete once the operator has seen every Ready
 * (non-auxiliary) agent pod report averaging_completed 1, which an agent reports only once it
 * reached completion.rounds and the final checkpoint is durable (or checkpoints are off). Agents
 * that are not Ready (pending, crash-looping) are not waited for: they hold no part of the result.
 * The operator then writes status.completionTime, and from then on Complete is derived from
 * that field alone (True once the agents are stopped, with podPolicy Delete: status.ts), never again from the agents: it stays True when the agents are scaled to zero
 * (podPolicy Delete), restart, or stop answering, and when the spec changes.
 */
import type { AveragingSwarm, CheckpointStatus } from '../../api/v1alpha1/types.js'
import { checkpointLocation, storeName } from '../builders/checkpoint-store.js'
import { completionDeadline } from '../builders/configmap.js'
import type { ConditionInput } from './conditions.js'
import type { Progress } from './status.js'

/** Why the checkpoint store is not usable (the claim or the S3 Secret is missing): a CheckpointsFailing reason and its sentence. */
export interface StoreProblem {
  reason: 'ClaimNotFound' | 'SecretNotFound' | 'SecretKeyNotFound'
  message: string
}

/** status.completionTime: kept once set; set now when every Ready agent reports completion (never once Failed). */
export function completionTimeOf (s: AveragingSwarm, progress: Progress | undefined, now: string): string | undefined {
  if (s.status?.completionTime !== undefined) return s.status.completionTime
  if (s.status?.failureTime !== undefined) return undefined
  const c = progress?.completion
  return s.spec.completion !== undefined && c !== undefined && c.of > 0 && c.completed === c.of ? now : undefined
}

const policyText = (s: AveragingSwarm): string =>
  (s.spec.completion?.podPolicy ?? 'Delete') === 'Delete' ? 'the agents are scaled to zero (completion.podPolicy Delete)' : 'the agents are kept, idle (completion.podPolicy Keep)'

/**
 * Which criterion ended the run, as far as the operator can tell (the agents report only that
 * they completed): rounds once the round count reached them, duration once its deadline passed,
 * else the trainers' exit when that is on.
 */
function endedBy (s: AveragingSwarm, completionTime: string, rounds: number): { reason: string, what: string } {
  const c = s.spec.completion
  if (c?.rounds !== undefined && rounds >= c.rounds) return { reason: 'RoundsReached', what: `completed its ${c.rounds} rounds` }
  const deadline = c?.duration === undefined ? undefined : completionDeadline(s.metadata.creationTimestamp, c.duration)
  if (deadline !== undefined && Date.parse(completionTime) >= Date.parse(deadline)) return { reason: 'DurationReached', what: `ran for its duration ${String(c?.duration)}` }
  if (c?.onTrainerExit === true) return { reason: 'TrainerFinished', what: 'finished with its trainer' }
  return { reason: 'Completed', what: 'completed its run' }
}

/** "1000 averaging rounds, 2h after creation or its trainer's exit, whichever comes first": the criteria that are set. */
function criteria (s: AveragingSwarm): string | undefined {
  const c = s.spec.completion
  const parts = [
    ...(c?.rounds === undefined ? [] : [`${c.rounds} averaging rounds`]),
    ...(c?.duration === undefined ? [] : [`${c.duration} after creation`]),
    ...(c?.onTrainerExit === true ? ['its trainer\'s exit'] : [])
  ]
  if (parts.length <= 1) return parts[0]
  return `${parts.slice(0, -1).join(', ')} or ${parts.at(-1) as string}, whichever comes first`
}

/**
 * Complete, only for a swarm with spec.completion or one that already completed. Between
 * completionTime and the agents' stop (podPolicy Delete) it is False, reason Stopping, with the
 * message it will have, so a person sees the result is saved and what is still to happen.
 */
export function completeCondition (s: AveragingSwarm, completionTime: string | undefined, progress: Progress | undefined, stopping = false): ConditionInput | undefined {
  if (completionTime !== undefined) {
    const saved = s.spec.checkpoint === undefined ? ' (spec.checkpoint is unset: the result was not saved)' : ' with the final checkpoint durable'
    const by = endedBy(s, completionTime, progress?.roundsCompleted ?? s.status?.roundsCompleted ?? 0)
    if (stopping) return { type: 'Complete', status: 'False', reason: 'Stopping', message: `Every Ready agent ${by.what}${saved}; the agents are being scaled to zero (completion.podPolicy Delete).` }
    return { type: 'Complete', status: 'True', reason: by.reason, message: `Every Ready agent ${by.what}${saved}; ${policyText(s)}.` }
  }
  const until = criteria(s)
  if (until === undefined) return undefined
  const c = progress?.completion
  return {
    type: 'Complete',
    status: 'False',
    reason: 'Running',
    message: c === undefined ? `Runs until ${until}.` : `${c.completed} of ${c.of} Ready agents completed their run (at ${until}).`
  }
}

/**
 * CheckpointsFailing, only with spec.checkpoint: True when the store is missing (the named claim,
 * or the S3 Secret or one of its keys: the agents then run without checkpoints), or when an
 * agent's failed-write counter grew and no newer checkpoint became durable since. Averaging goes
 * on either way (Degraded is not set). After an operator restart, until a scrape tells, the
 * previous write-failure value is kept.
 */
export function checkpointsFailingCondition (s: AveragingSwarm, progress: Progress | undefined, problem?: StoreProblem): ConditionInput | undefined {
  if (s.spec.checkpoint === undefined) return undefined
  if (problem !== undefined) return { type: 'CheckpointsFailing', status: 'True', reason: problem.reason, message: problem.message }
  const prev = s.status?.conditions?.find(c => c.type === 'CheckpointsFailing')
  const failing = progress?.checkpointFailing ?? (prev?.status === 'True' && prev.reason === 'WriteFailed')
  const check = s.spec.checkpoint.s3 !== undefined ? `Check that ${storeName(s)} exists and that the credentials in Secret ${s.spec.checkpoint.s3.secretRef.name} may write to it.` : `Check that ${storeName(s)} is bound, writable and not full.`
  return failing
    ? { type: 'CheckpointsFailing', status: 'True', reason: 'WriteFailed', message: `A checkpoint write failed (averaging_checkpoint_writes_total{outcome="failed"} grew) and no newer checkpoint is durable since; the agents' logs say why, and averaging goes on. ${check}` }
    : { type: 'CheckpointsFailing', status: 'False', reason: 'NoFailures', message: 'No checkpoint write failed since the newest checkpoint.' }
}

/** status.checkpoint: the newest durable checkpoint the agents reported, where it lies in the claim or bucket. */
export function checkpointStatus (s: AveragingSwarm, progress: Progress | undefined): CheckpointStatus | undefined {
  const cp = progress?.checkpoint
  // Skips only grow: the operator counts them from its start, the status keeps the larger count across restarts.
  const skippedNow = Math.max(progress?.checkpointsSkipped ?? 0, s.status?.checkpoint?.skipped ?? 0)
  const skipped = skippedNow > 0 ? { skipped: skippedNow } : {}
  if (cp === undefined) return s.status?.checkpoint === undefined && skippedNow === 0 ? s.status?.checkpoint : { ...s.status?.checkpoint, ...skipped }
  const location = checkpointLocation(s, cp.round)
  return { round: cp.round, time: cp.time, ...(location === undefined ? {} : { location }), ...skipped }
}
