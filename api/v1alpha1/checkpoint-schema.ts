/**
 * The CRD's checkpoint and completion fields (spec.checkpoint, spec.completion,
 * spec.ttlSecondsAfterFinished, status.checkpoint), from the rows of api/checkpoint-parameters.ts.
 */
import { CHECKPOINT_MOUNT_DIR, CHECKPOINT_PARAMETERS as P, COMPLETION_DURATION, COMPLETION_RULES, DEFAULT_POD_POLICY, DNS1123_SUBDOMAIN, POD_POLICIES } from '../checkpoint-parameters.js'
import { DURATION_PATTERN, formatRange } from '../parameter-bounds.js'
import { int, obj, str, type CelRule, type Schema } from './schema-builders.js'

const bounded = (description: string, b: { min: number, max: number }, dflt?: number): Schema =>
  int(`${description} ${b.min} to ${b.max}.`, { minimum: b.min, maximum: b.max, ...(dflt === undefined ? {} : { default: dflt }) })

export const checkpoint = obj(`Checkpoints of the averaged tensors in safetensors, written into a volume shared by the agents (mounted at ${CHECKPOINT_MOUNT_DIR}, files under <swarm name>/: round-<n>.json, the manifest, naming its round-<n>-<writer tag>.safetensors). An agent that finds no live peer to download state from restores the newest complete one. Absent: nothing is written or restored.`, {
  every: bounded('Averaging rounds between checkpoints;', P.every.bound, P.every.default),
  keep: bounded('Newest complete checkpoints kept; older ones are deleted once a newer one is complete;', P.keep.bound, P.keep.default),
  volume: obj('Where checkpoints are written: an existing PersistentVolumeClaim in the swarm\'s namespace, shared by every agent (ReadWriteMany when agents run on more than one node). The operator never creates, changes or deletes it.', {
    claimName: str('Name of the PersistentVolumeClaim.', { minLength: 1, maxLength: 253, pattern: DNS1123_SUBDOMAIN })
  }, { required: ['claimName'] })
}, { required: ['volume'] })

export const completion = obj('When the run ends: after rounds rounds or once duration has passed since the swarm was created, whichever comes first (one of them is required). The agents stop averaging and write a final checkpoint (with spec.checkpoint); once every Ready agent reports it, the swarm is Complete (condition Complete=True, phase Succeeded), for good. Absent: the swarm averages until it is deleted.', {
  rounds: bounded('Averaging rounds after which the run ends;', P.completionRounds.bound),
  duration: str(`Time after the swarm's creation at which the run ends, at the end of the round under way (Go duration, ${formatRange(COMPLETION_DURATION)}).`, { pattern: DURATION_PATTERN, maxLength: 32 }),
  podPolicy: str('What happens to the agents once the swarm is Complete: Delete scales them to zero (the swarm and its status stay), Keep leaves them running, idle.', { enum: POD_POLICIES, default: DEFAULT_POD_POLICY })
})

export const ttlSecondsAfterFinished = int('Seconds after completionTime at which the operator deletes this AveragingSwarm, and with it everything it owns, as a Job\'s TTL does; the checkpoint volume is the user\'s and is never touched. Needs completion.', { minimum: 0, maximum: 2147483647 })

export const checkpointStatus = obj('The newest checkpoint the agents report durable, read from their metrics.', {
  round: int('Averaging round of the checkpoint.', { minimum: 0 }),
  time: str('When it was written.', { format: 'date-time' }),
  location: str('Where it is: pvc/<claim>/<swarm>/round-<n>.json, the manifest that names the data file.', { maxLength: 1024 })
})

export function completionRules (): CelRule[] {
  return COMPLETION_RULES.map(r => ({ rule: r.cel, message: r.message, fieldPath: `.${r.field}` }))
}
