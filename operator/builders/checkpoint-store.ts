/**
 * Where a swarm's checkpoints live (spec.checkpoint.volume or .s3): the claim the agents mount,
 * the claim to create from a template, the S3 variables of the agent's contract, and how status
 * and messages name the store. Pure.
 */
import { AGENT_ENV } from '../../api/agent-env.js'
import { S3_SECRET_KEYS } from '../../api/checkpoint-parameters.js'
import type { AveragingSwarm, CheckpointS3 } from '../../api/v1alpha1/types.js'
import type { KubeObj } from '../objects.js'
import { names, ownedLabels } from './names.js'

export interface EnvVar { name: string, value?: string, valueFrom?: Record<string, unknown> }

/** The claim the agents mount: spec's claimName, or the one made from claimTemplate; undefined for S3 or no checkpoints. */
export function checkpointClaimName (s: AveragingSwarm): string | undefined {
  const v = s.spec.checkpoint?.volume
  if (v === undefined) return undefined
  return v.claimName ?? (v.claimTemplate === undefined ? undefined : names.checkpointClaim(s))
}

/**
 * The claim to create from spec.checkpoint.volume.claimTemplate. Labelled as the swarm's so a
 * person finds it, but with no owner reference: the checkpoints in it are the run's result, and
 * neither deleting the swarm nor its ttlSecondsAfterFinished may take them with it.
 */
export function buildCheckpointClaim (s: AveragingSwarm): KubeObj | undefined {
  const t = s.spec.checkpoint?.volume?.claimTemplate
  if (t === undefined) return undefined
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: { name: names.checkpointClaim(s), namespace: s.metadata.namespace ?? 'default', labels: ownedLabels(s) },
    spec: {
      accessModes: t.accessModes,
      resources: { requests: { storage: t.size } },
      ...(t.storageClassName === undefined ? {} : { storageClassName: t.storageClassName })
    }
  }
}

/** The agent's S3 variables (api/agent-env.ts): the bucket's coordinates, and the credentials from the user's Secret as the AWS_* variables the agent reads (which are also the Secret's default keys). */
export function s3Env (s3: CheckpointS3): EnvVar[] {
  const v = (name: string, value: string): EnvVar => ({ name, value })
  const secret = (name: string, key: string, optional = false): EnvVar => ({ name, valueFrom: { secretKeyRef: { name: s3.secretRef.name, key, ...(optional ? { optional: true } : {}) } } })
  return [
    v(AGENT_ENV.checkpointS3Bucket.name, s3.bucket),
    ...(s3.endpoint === undefined ? [] : [v(AGENT_ENV.checkpointS3Endpoint.name, s3.endpoint)]),
    v(AGENT_ENV.checkpointS3Region.name, s3.region),
    ...(s3.prefix === undefined ? [] : [v(AGENT_ENV.checkpointS3Prefix.name, s3.prefix)]),
    v(AGENT_ENV.checkpointS3PathStyle.name, String(s3.forcePathStyle)),
    secret(S3_SECRET_KEYS.accessKeyId, s3.secretRef.accessKeyIdKey),
    secret(S3_SECRET_KEYS.secretAccessKey, s3.secretRef.secretAccessKeyKey),
    // Temporary credentials only: a Secret without the key still starts the agent.
    ...(s3.secretRef.sessionTokenKey === undefined ? [] : [secret(S3_SECRET_KEYS.sessionToken, s3.secretRef.sessionTokenKey, true)])
  ]
}

/**
 * Where round n's manifest lies, in the agents' layout (agent/checkpoint/README.md):
 * <AVS_CHECKPOINT_DIR or prefix>/<AVS_SWARM>/round-<n>.json, AVS_SWARM being the swarm's name.
 */
export function checkpointLocation (s: AveragingSwarm, round: number): string | undefined {
  const file = `${s.metadata.name}/round-${round}.json`
  const s3 = s.spec.checkpoint?.s3
  if (s3 !== undefined) return `s3://${s3.bucket}/${s3.prefix === undefined || s3.prefix === '' ? '' : `${s3.prefix}/`}${file}`
  const claim = checkpointClaimName(s)
  return claim === undefined ? undefined : `pvc/${claim}/${file}`
}

/** "claim ckpt" or "bucket models", for messages. */
export function storeName (s: AveragingSwarm): string {
  const s3 = s.spec.checkpoint?.s3
  return s3 !== undefined ? `bucket ${s3.bucket}` : `claim ${checkpointClaimName(s) ?? '(none)'}`
}
