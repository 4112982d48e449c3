/**
 * The CRD's checkpoint, completion and failure fields (spec.checkpoint, spec.restoreFrom,
 * spec.completion, spec.backoffLimit, spec.ttlSecondsAfterFinished, status.checkpoint), from the
 * rows of api/checkpoint-parameters.ts.
 */
import {
  BACKOFF_LIMIT, CHECKPOINT_MOUNT_DIR, CHECKPOINT_PARAMETERS as P, CLAIM_ACCESS_MODES, CLAIM_SIZE_PATTERN, COMPLETION_DURATION, CHECKPOINT_INTERVAL, DEFAULT_CLAIM_ACCESS_MODES,
  DEFAULT_POD_POLICY, DNS1123_SUBDOMAIN, POD_POLICIES, S3_BUCKET, S3_ENDPOINT, S3_PATH_STYLE_DEFAULT, S3_PREFIX, S3_REGION, S3_SECRET_KEYS, SECRET_KEY_PATTERN, SPEC_RULES
} from '../checkpoint-parameters.js'
import { DURATION_PATTERN, formatRange } from '../parameter-bounds.js'
import { arr, bool, int, obj, str, type CelRule, type Schema } from './schema-builders.js'

const bounded = (description: string, b: { min: number, max: number }, dflt?: number): Schema =>
  int(`${description} ${b.min} to ${b.max}.`, { minimum: b.min, maximum: b.max, ...(dflt === undefined ? {} : { default: dflt }) })

const dnsName = (description: string): Schema => str(description, { minLength: 1, maxLength: 253, pattern: DNS1123_SUBDOMAIN })

const claimTemplate = obj('A PersistentVolumeClaim the operator creates, named <swarm name>-checkpoints and labelled as the swarm\'s, once: it is never changed or deleted, and has no owner reference, so deleting the swarm (or its ttlSecondsAfterFinished) leaves it and the checkpoints in it. Delete it yourself when the result is no longer needed.', {
  size: str('Storage the claim requests: a positive quantity such as 10Gi or 500M.', { pattern: CLAIM_SIZE_PATTERN, maxLength: 32 }),
  storageClassName: str('StorageClass of the claim; "" asks for a PersistentVolume without a class; absent, the cluster\'s default class.', { maxLength: 253, pattern: `^$|${DNS1123_SUBDOMAIN}` }),
  accessModes: arr('Access modes of the claim: ReadWriteMany (every agent, on any node) or ReadWriteOnce (agents on one node).',
    str('An access mode.', { enum: CLAIM_ACCESS_MODES }), { minItems: 1, maxItems: 2, default: [...DEFAULT_CLAIM_ACCESS_MODES], 'x-kubernetes-list-type': 'set' })
}, { required: ['size'] })

const volume = obj(`A PersistentVolumeClaim in the swarm's namespace that every writing agent mounts (at ${CHECKPOINT_MOUNT_DIR}; files under <swarm name>/: round-<n>.json, the manifest, naming its round-<n>-<writer tag>.safetensors): claimName, an existing claim the operator never creates, changes or deletes, or claimTemplate, a claim the operator creates (exactly one). ReadWriteMany when agents run on more than one node.`, {
  claimName: dnsName('Name of an existing PersistentVolumeClaim. While it does not exist the agents run without checkpoints and CheckpointsFailing=True (ClaimNotFound); once it does, the agents are rolled to mount it.'),
  claimTemplate
})

const secretRef = obj('The Secret in the swarm\'s namespace holding the bucket\'s credentials, passed to the agents as AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN. While it (or a required key) is missing the agents run without checkpoints and CheckpointsFailing=True (SecretNotFound, SecretKeyNotFound).', {
  name: dnsName('Name of the Secret.'),
  accessKeyIdKey: str('Key of the access key id in the Secret.', { pattern: SECRET_KEY_PATTERN, maxLength: 253, default: S3_SECRET_KEYS.accessKeyId }),
  secretAccessKeyKey: str('Key of the secret access key in the Secret.', { pattern: SECRET_KEY_PATTERN, maxLength: 253, default: S3_SECRET_KEYS.secretAccessKey }),
  sessionTokenKey: str('Key of a session token in the Secret, for temporary credentials; optional in the Secret too.', { pattern: SECRET_KEY_PATTERN, maxLength: 253 })
}, { required: ['name'] })

const s3 = obj('An S3-compatible bucket instead of a volume: objects <prefix>/<swarm name>/round-<n>.json (the manifest) and round-<n>-<writer tag>.safetensors. The operator never creates or deletes the bucket or its objects.', {
  bucket: str('Name of the bucket (S3\'s rules: 3 to 63 lower-case letters, digits, dots and hyphens).', { ...S3_BUCKET }),
  endpoint: str('http(s)://host[:port] of a self-hosted S3-compatible server (MinIO, Ceph RGW, ...); absent, AWS S3 of region.', { ...S3_ENDPOINT }),
  region: str('Region of the bucket (the signing region of a self-hosted server).', { pattern: S3_REGION.pattern, maxLength: S3_REGION.maxLength, default: S3_REGION.default }),
  prefix: str('Key prefix the swarms\' folders live under, without leading or trailing slash; absent, the bucket\'s root.', { ...S3_PREFIX }),
  forcePathStyle: bool('true: <endpoint>/<bucket>/<key> addressing, which most self-hosted servers need; false: <bucket>.<endpoint>/<key>.', { default: S3_PATH_STYLE_DEFAULT }),
  secretRef
}, { required: ['bucket', 'secretRef'] })

export const checkpoint = obj('Checkpoints of the averaged tensors in safetensors, in a volume or an S3-compatible bucket (exactly one), shared by the bootstrap and regular agents. An agent that finds no live peer to download state from restores the newest complete one. The checkpoints are the user\'s result: deleting the swarm never deletes them. Absent: nothing is written or restored.', {
  every: bounded('Averaging rounds between checkpoints;', P.every.bound, P.every.default),
  keep: bounded('Newest complete checkpoints kept; older ones are deleted once a newer one is complete;', P.keep.bound, P.keep.default),
  interval: str(`Time between checkpoints, beside every: a round is also written once this long has passed since the newest checkpoint (Go duration, ${formatRange(CHECKPOINT_INTERVAL)}); absent, rounds alone decide.`, { pattern: DURATION_PATTERN, maxLength: 32 }),
  volume,
  s3
})

export const restoreFrom = obj('Start a fresh swarm from another swarm\'s checkpoint in the same store (this swarm\'s checkpoint claim or bucket), e.g. to continue a run in another cluster. Used only when no live peer offers its state and this swarm has no checkpoint of its own yet. Needs checkpoint.', {
  swarm: dnsName('Name of the swarm whose checkpoint to start from (its folder in the store).'),
  round: bounded('Round of its checkpoint to start from; absent, its newest complete one;', P.restoreFromRound.bound)
}, { required: ['swarm'] })

export const completion = obj('When the run ends: after rounds rounds, once duration has passed since the swarm was created, or once the trainers finish (onTrainerExit), whichever comes first (one of them is required). The agents stop averaging and write a final checkpoint (with spec.checkpoint); once every Ready agent reports it, status.completionTime is set, and once the agents are stopped (podPolicy Delete) or at once (Keep) the swarm is Complete (condition Complete=True, phase Succeeded), for good. Absent: the swarm averages until it is deleted.', {
  rounds: bounded('Averaging rounds after which the run ends;', P.completionRounds.bound),
  duration: str(`Time after the swarm's creation at which the run ends, at the end of the round under way (Go duration, ${formatRange(COMPLETION_DURATION)}).`, { pattern: DURATION_PATTERN, maxLength: 32 }),
  onTrainerExit: bool('true: an agent\'s run ends once its trainer says it has finished (workload.type sidecar only); the swarm is Complete once every Ready agent has.', { default: false }),
  podPolicy: str('What happens to the agents once the swarm is Complete: Delete scales them to zero (the swarm and its status stay), Keep leaves them running, idle.', { enum: POD_POLICIES, default: DEFAULT_POD_POLICY })
})

export const backoffLimit = int(`Restarts of the swarm's agent and trainer containers, summed over its pods (a container whose last exit was 0, such as a trainer that finished, not counted), beyond which the swarm is Failed (condition Failed=True, phase Failed, for good) and every agent is scaled to zero, as a Job's backoffLimit; ${BACKOFF_LIMIT.min} to ${BACKOFF_LIMIT.max}. Absent: restarts never fail the swarm.`, { minimum: BACKOFF_LIMIT.min, maximum: BACKOFF_LIMIT.max })

export const ttlSecondsAfterFinished = int('Seconds after completionTime (or failureTime) at which the operator deletes this AveragingSwarm, and with it everything it owns, as a Job\'s TTL does; the checkpoints (claim or bucket) are the user\'s and are never touched. Needs completion or backoffLimit.', { minimum: 0, maximum: 2147483647 })

export const checkpointStatus = obj('The newest checkpoint the agents report durable, read from their metrics.', {
  round: int('Averaging round of the checkpoint.', { minimum: 0 }),
  time: str('When it was written.', { format: 'date-time' }),
  location: str('Where it is: pvc/<claim>/<swarm>/round-<n>.json or s3://<bucket>/<prefix>/<swarm>/round-<n>.json, the manifest that names the data file.', { maxLength: 1024 }),
  skipped: int('Checkpoints that restoring agents skipped as torn, corrupt or of other tensors (each named with its reason in that agent\'s log; an Event says when the count grows).', { minimum: 0 })
})

/** The rules between spec fields (api/checkpoint-parameters.ts), as CEL on the spec. */
export function specRules (): CelRule[] {
  return SPEC_RULES.map(r => ({ rule: r.cel, message: r.message, fieldPath: `.${r.field}` }))
}
