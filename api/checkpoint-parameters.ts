/**
 * Bounds and defaults of spec.checkpoint and spec.completion, one row each, as
 * api/averaging-parameters.ts does for the averaging section: the CRD schema (api/v1alpha1/schema.ts),
 * withDefaults() and the operator's ConfigMap take them from here, and the defaults are the
 * agent's own (api/agent-env.ts), so a swarm the API server admits is one the agent runs.
 * The agent's parser of these variables (agent/config.ts) can check against the same bounds.
 */
import { AGENT_ENV } from './agent-env.js'
import type { Bound } from './parameter-bounds.js'

export interface CheckpointParameter {
  readonly env: string
  readonly bound: Bound & { kind: 'int' }
  readonly default?: number
}

export const CHECKPOINT_PARAMETERS = {
  every: { env: AGENT_ENV.checkpointEvery.name, bound: { kind: 'int', min: 1, max: 1_000_000_000 }, default: Number(AGENT_ENV.checkpointEvery.default) },
  keep: { env: AGENT_ENV.checkpointKeep.name, bound: { kind: 'int', min: 1, max: 1000 }, default: Number(AGENT_ENV.checkpointKeep.default) },
  /** No default: without spec.completion the swarm runs until deleted. */
  completionRounds: { env: AGENT_ENV.completionRounds.name, bound: { kind: 'int', min: 1, max: 1_000_000_000_000 } }
} as const satisfies Record<string, CheckpointParameter>

/** What happens to the agents once the swarm is Complete. */
export const POD_POLICIES = ['Delete', 'Keep'] as const
export type PodPolicy = (typeof POD_POLICIES)[number]
export const DEFAULT_POD_POLICY: PodPolicy = 'Delete'

/** Where the operator mounts spec.checkpoint.volume in the agent container (AVS_CHECKPOINT_DIR). */
export const CHECKPOINT_MOUNT_DIR = '/var/lib/avs/checkpoints'
/** DNS-1123 subdomain, what a PersistentVolumeClaim's name must be. */
export const DNS1123_SUBDOMAIN = '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'

/** A rule between spec fields: CEL for the API server, `holds` for the local validator. */
export interface SpecRule {
  readonly field: string
  readonly message: string
  readonly cel: string
  readonly holds: (spec: Record<string, unknown>) => boolean
}

export const COMPLETION_RULES: readonly SpecRule[] = [
  {
    field: 'ttlSecondsAfterFinished',
    message: 'ttlSecondsAfterFinished needs completion: a swarm without completion never finishes',
    cel: '!has(self.ttlSecondsAfterFinished) || has(self.completion)',
    holds: s => s.ttlSecondsAfterFinished === undefined || s.completion !== undefined
  }
]
