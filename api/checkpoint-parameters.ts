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

/** spec.checkpoint.interval: a Go duration from 10 seconds to a year, time between checkpoints beside `every` rounds. */
export const CHECKPOINT_INTERVAL: Bound & { kind: 'duration' } = { kind: 'duration', min: '10s', max: '8760h' }

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

/**
 * spec.checkpoint.volume.claimTemplate.size: a positive storage quantity ("10Gi", "500M", "0.5Ti"),
 * never zero (a claim must request more than 0 bytes). Decimal or binary suffix, no exponent form.
 */
export const CLAIM_SIZE_PATTERN = '^([1-9][0-9]*(\\.[0-9]+)?|0\\.[0-9]*[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$'
/**
 * Access modes a checkpoint claim may have: every writing agent mounts it read-write, so
 * ReadOnlyMany is useless, and ReadWriteOncePod would keep all agents but one Pending.
 */
export const CLAIM_ACCESS_MODES = ['ReadWriteMany', 'ReadWriteOnce'] as const
export const DEFAULT_CLAIM_ACCESS_MODES: ReadonlyArray<(typeof CLAIM_ACCESS_MODES)[number]> = ['ReadWriteMany']

/**
 * spec.checkpoint.s3, bounded so that whatever the API server admits the agent's S3 client takes:
 * a bucket name by S3's rules (3 to 63 characters, lower-case DNS labels), an endpoint that is an
 * http(s) URL of a hostname or IPv4 address and optional port (no path, user, query or IPv6), a key prefix without leading,
 * trailing or doubled slashes.
 */
export const S3_BUCKET = { pattern: DNS1123_SUBDOMAIN, minLength: 3, maxLength: 63 } as const
// Hostname labels without doubled hyphens (no punycode "xn--", which WHATWG URL parsing may refuse)
// and a last label that starts with a letter (an all-digit one is parsed as IPv4), or a dotted quad.
const OCTET = '(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])'
const HOST = `(([A-Za-z0-9]+(-[A-Za-z0-9]+)*\\.)*[A-Za-z][A-Za-z0-9]*(-[A-Za-z0-9]+)*|${OCTET}(\\.${OCTET}){3})`
const PORT = '([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])'
export const S3_ENDPOINT = { pattern: `^https?://${HOST}(:${PORT})?$`, maxLength: 512 } as const
export const S3_PREFIX = { pattern: "^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*$", maxLength: 512 } as const
export const S3_REGION = { pattern: '^[A-Za-z0-9_-]+$', maxLength: 64, default: AGENT_ENV.checkpointS3Region.default } as const
export const S3_PATH_STYLE_DEFAULT: boolean = (AGENT_ENV.checkpointS3PathStyle.default as string) === 'true'
/** Default keys of spec.checkpoint.s3.secretRef: the variables the agent reads them as. */
export const S3_SECRET_KEYS = { accessKeyId: 'AWS_ACCESS_KEY_ID', secretAccessKey: 'AWS_SECRET_ACCESS_KEY', sessionToken: 'AWS_SESSION_TOKEN' } as const
/** A Secret's data key. */
export const SECRET_KEY_PATTERN = '^[-._a-zA-Z0-9]+$'

/** spec.backoffLimit: restarts of agent and trainer containers, summed over the swarm's pods, as a Job's (int32, ≥ 0). */
export const BACKOFF_LIMIT: Bound & { kind: 'int' } = { kind: 'int', min: 0, max: 2147483647 }

/** A rule between spec fields: CEL for the API server, `holds` for the local validator. */
export interface SpecRule {
  readonly field: string
  readonly message: string
  readonly cel: string
  readonly holds: (spec: Record<string, unknown>) => boolean
}

type Obj = Record<string, unknown>
/** A section of an object that may be anything (the local validator sees unchecked input). */
const section = (o: unknown, k: string): Obj | undefined => {
  const v = o !== null && typeof o === 'object' ? (o as Obj)[k] : undefined
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? v as Obj : undefined
}
const exactlyOne = (o: Obj | undefined, a: string, b: string): boolean => o === undefined || ((o[a] !== undefined) !== (o[b] !== undefined))

/**
 * The rule that a Go duration at `path` under spec lies within `bound`: OpenAPI cannot compare
 * durations, so the CRD carries it as CEL; a value the pattern already rejects is left to the pattern.
 */
export function durationRule (path: readonly string[], bound: Bound & { kind: 'duration' }): SpecRule {
  const field = path.join('.')
  const absent = path.map((_, i) => `!has(self.${path.slice(0, i + 1).join('.')})`).join(' || ')
  return {
    field,
    message: `${field} must be ${formatRange(bound)}`,
    cel: `${absent} || !self.${field}.matches('${DURATION_PATTERN}') || (duration(self.${field}) >= duration('${bound.min}') && duration(self.${field}) <= duration('${bound.max}'))`,
    holds: s => {
      let v: unknown = s
      for (const k of path) v = v !== null && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined
      return typeof v !== 'string' || !new RegExp(DURATION_PATTERN).test(v) || checkValue(bound, v) === undefined
    }
  }
}

export const CHECKPOINT_RULES: readonly SpecRule[] = [
  {
    field: 'checkpoint',
    message: 'checkpoint needs exactly one of volume or s3: where the checkpoints are stored',
    cel: '!has(self.checkpoint) || has(self.checkpoint.volume) != has(self.checkpoint.s3)',
    holds: s => exactlyOne(section(s, 'checkpoint'), 'volume', 's3')
  },
  {
    field: 'checkpoint.volume',
    message: 'checkpoint.volume needs exactly one of claimName (an existing claim) or claimTemplate (a claim the operator creates)',
    cel: '!has(self.checkpoint) || !has(self.checkpoint.volume) || has(self.checkpoint.volume.claimName) != has(self.checkpoint.volume.claimTemplate)',
    holds: s => exactlyOne(section(section(s, 'checkpoint'), 'volume'), 'claimName', 'claimTemplate')
  },
  durationRule(['checkpoint', 'interval'], CHECKPOINT_INTERVAL),
  {
    field: 'restoreFrom',
    message: 'restoreFrom needs checkpoint: the other swarm\'s checkpoint is read from this swarm\'s checkpoint store (the same claim or bucket)',
    cel: '!has(self.restoreFrom) || has(self.checkpoint)',
    holds: s => s.restoreFrom === undefined || s.checkpoint !== undefined
  }
]

/** completion.onTrainerExit, true: the API server's defaulting fills false, so has() alone is not enough. */
const onTrainerExit = (c: Obj | undefined): boolean => c?.onTrainerExit === true

export const COMPLETION_RULES: readonly SpecRule[] = [
  {
    field: 'completion',
    message: 'completion needs rounds, duration or onTrainerExit (any of them): the run ends at whichever comes first',
    cel: '!has(self.completion) || has(self.completion.rounds) || has(self.completion.duration) || (has(self.completion.onTrainerExit) && self.completion.onTrainerExit)',
    holds: s => {
      const c = section(s, 'completion')
      return c === undefined || c.rounds !== undefined || c.duration !== undefined || onTrainerExit(c)
    }
  },
  durationRule(['completion', 'duration'], COMPLETION_DURATION),
  {
    field: 'completion.onTrainerExit',
    message: 'completion.onTrainerExit needs workload.type sidecar: only a trainer container can finish the run',
    cel: "!has(self.completion) || !has(self.completion.onTrainerExit) || !self.completion.onTrainerExit || self.workload.type == 'sidecar'",
    holds: s => !onTrainerExit(section(s, 'completion')) || section(s, 'workload')?.type === 'sidecar'
  },
  {
    field: 'ttlSecondsAfterFinished',
    message: 'ttlSecondsAfterFinished needs completion or backoffLimit: a swarm with neither never finishes',
    cel: '!has(self.ttlSecondsAfterFinished) || has(self.completion) || has(self.backoffLimit)',
    holds: s => s.ttlSecondsAfterFinished === undefined || s.completion !== undefined || s.backoffLimit !== undefined
  }
]

/** Every rule between spec fields, as the CRD carries them and the local validator checks them. */
export const SPEC_RULES: readonly SpecRule[] = [...CHECKPOINT_RULES, ...COMPLETION_RULES]
