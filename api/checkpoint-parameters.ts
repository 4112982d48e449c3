/**
 * Bounds and defaults of spec.checkpoint and spec.completion, one row each, as
 * api/averaging-parameters.ts does for the averaging section: the CRD schema (api/v1alpha1/schema.ts),
 * withDefaults() and the operator's ConfigMap take them from here, and the defaults are the
 * agent's own (api/agent-env.ts), so a swarm the API server admits is one the agent runs.
 * The agent's parser of these variables (agent/config.ts) can check against the same bounds.
 */
import { AGENT_ENV } from './agent-env.js'
import { DURATION_PATTERN, checkValue, formatRange, type Bound } from './parameter-bounds.js'

export interface CheckpointParameter {
  readonly env: string
  readonly bound: Bound & { kind: 'int' }
  readonly default?: number
}

export const CHECKPOINT_PARAMETERS = {
  every: { env: AGENT_ENV.checkpointEvery.name, bound: { kind: 'int', min: 1, max: 1_000_000_000 }, default: Number(AGENT_ENV.checkpointEvery.default) },
  keep: { env: AGENT_ENV.checkpointKeep.name, bound: { kind: 'int', min: 1, max: 1000 }, default: Number(AGENT_ENV.checkpointKeep.default) },
  /** No default: without spec.completion the swarm runs until deleted. */
  completionRounds: { env: AGENT_ENV.completionRounds.name, bound: { kind: 'int', min: 1, max: 1_000_000_000_000 } },
  /** No default: without it, the newest complete checkpoint of spec.restoreFrom.swarm. */
  restoreFromRound: { env: AGENT_ENV.restoreFromRound.name, bound: { kind: 'int', min: 1, max: 1_000_000_000_000 } }
} as const satisfies Record<string, CheckpointParameter>

/** spec.completion.duration: a Go duration from a minute to a year, counted from the swarm's creation. */
export const COMPLETION_DURATION: Bound & { kind: 'duration' } = { kind: 'duration', min: '1m', max: '8760h' }

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
    field: 'completion',
    message: 'completion needs rounds or duration (or both): the run ends at whichever comes first',
    cel: '!has(self.completion) || has(self.completion.rounds) || has(self.completion.duration)',
    holds: s => {
      const c = s.completion as Record<string, unknown> | undefined
      return c === undefined || c === null || typeof c !== 'object' || c.rounds !== undefined || c.duration !== undefined
    }
  },
  {
    field: 'completion.duration',
    message: `completion.duration must be ${formatRange(COMPLETION_DURATION)}`,
    // OpenAPI cannot compare durations; a value the pattern already rejects is left to it.
    cel: `!has(self.completion) || !has(self.completion.duration) || !self.completion.duration.matches('${DURATION_PATTERN}') || (duration(self.completion.duration) >= duration('${COMPLETION_DURATION.min}') && duration(self.completion.duration) <= duration('${COMPLETION_DURATION.max}'))`,
    holds: s => {
      const d = (s.completion as Record<string, unknown> | undefined)?.duration
      return typeof d !== 'string' || !new RegExp(DURATION_PATTERN).test(d) || checkValue(COMPLETION_DURATION, d) === undefined
    }
  },
  {
    field: 'ttlSecondsAfterFinished',
    message: 'ttlSecondsAfterFinished needs completion: a swarm without completion never finishes',
    cel: '!has(self.ttlSecondsAfterFinished) || has(self.completion)',
    holds: s => s.ttlSecondsAfterFinished === undefined || s.completion !== undefined
  }
]
