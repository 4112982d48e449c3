/**
 * The averaging parameters, one row each: CRD field, agent environment variable, default, bound
 * and meaning. The CRD schema's averaging section (api/v1alpha1/schema.ts), its defaults
 * (api/v1alpha1/defaults.ts), the agent's environment contract (api/agent-env.ts), the agent's
 * env parsing (agent/config.ts) and the averager's defaults (agent/averager.ts) all derive from
 * this table, so a swarm the API server admits is one the agent runs.
 *
 * Bounds are chosen so that admitted means sensible, and each description says why.
 */
import { DURATION_PATTERN, durationNanos, type Bound } from './parameter-bounds.js'

export { DURATION_PATTERN, durationNanos, parseDuration, MAX_TIMER_SECONDS } from './parameter-bounds.js'

export const COMPRESSIONS = ['none', 'float16', 'uniform8bit', 'blockwise8bit', 'auto'] as const
/** hivemind separates DHT key parts with '.' and the agent's protocol ids with ':'; neither may appear. */
export const PREFIX_PATTERN = '^[A-Za-z0-9_-]+$'

export interface AveragingParameter {
  /** Environment variable the agent reads (api/agent-env.ts). */
  readonly env: string
  readonly description: string
  readonly bound: Bound
  /** Default in the CRD's form; undefined: no default (prefix is set by the operator, bandwidth is optional). */
  readonly default?: string | number
}

export const AVERAGING_PARAMETERS = {
  prefix: {
    env: 'AVS_PREFIX',
    description: 'DHT key prefix shared by every agent of the swarm; agents with different prefixes never group. Defaults to <namespace>_<name>. 1 to 128 letters, digits, \'-\' or \'_\': hivemind separates key parts with \'.\' and the agent\'s protocol ids with \':\'.',
    bound: { kind: 'string', pattern: PREFIX_PATTERN, minLength: 1, maxLength: 128, says: '1 to 128 letters, digits, \'-\' or \'_\' (no \'.\' or \':\')' }
  },
  targetGroupSize: {
    env: 'AVS_TARGET_GROUP_SIZE',
    description: 'Groups start averaging at once when they reach this many members; 2 to 256: a group of one averages with nobody, and one butterfly all-reduce among more than 256 peers splits tensors into parts too small to be worth a round trip.',
    bound: { kind: 'int', min: 2, max: 256 },
    default: 4
  },
  minGroupSize: {
    env: 'AVS_MIN_GROUP_SIZE',
    description: 'A leader whose time is up starts only with at least this many members, itself included; 2 to targetGroupSize: a group of one averages with nobody.',
    bound: { kind: 'int', min: 2, max: 256 },
    default: 2
  },
  initialGroupBits: {
    env: 'AVS_INITIAL_GROUP_BITS',
    description: 'Initial Moshpit group bits, up to 64 characters of 0 and 1 appended to the prefix; the agents change them after each round so that groups mix. Empty (the default): the operator lays the swarm out on a Moshpit grid of targetGroupSize by pod rank and swarm size (the <swarm>-members ConfigMap), so N = g^d members reach the exact mean in d rounds; set bits to lay out groups yourself.',
    bound: { kind: 'string', pattern: '^[01]*$', maxLength: 64, says: 'up to 64 characters of 0 and 1' },
    default: ''
  },
  averagingExpiration: {
    env: 'AVS_AVERAGING_EXPIRATION',
    description: 'How long a peer looks for a group before it declares itself again (Go duration), 1s to 1h: below a second a declaration expires before peers across a network can find it; past an hour an agent whose group fell apart waits that long to try again.',
    bound: { kind: 'duration', min: '1s', max: '1h' },
    default: '15s'
  },
  requestTimeout: {
    env: 'AVS_REQUEST_TIMEOUT',
    description: 'How long a follower waits for its leader\'s reply (Go duration), 100ms to 10m and shorter than averagingExpiration: below 100ms a reply cannot cross a network and back, and a follower must hear its leader before its own declaration expires.',
    bound: { kind: 'duration', min: '100ms', max: '10m' },
    default: '3s'
  },
  allreduceTimeout: {
    env: 'AVS_ALLREDUCE_TIMEOUT',
    description: 'Upper bound of one all-reduce once the group formed (Go duration), 1s to 24h; a peer that is slower loses only its own part. Below a second no group moves its parts; past 24h a stuck peer holds its group for days (and a Node timer holds at most 24.8 days).',
    bound: { kind: 'duration', min: '1s', max: '24h' },
    default: '60s'
  },
  partSizeBytes: {
    env: 'AVS_PART_SIZE_BYTES',
    description: 'Tensor bytes per streamed part, after compression; 1 KiB to 4 MiB: smaller parts spend more on framing than on data, larger ones exceed the frame size the agents accept.',
    bound: { kind: 'int', min: 1024, max: 4194304 },
    default: 65536
  },
  averagingAlpha: {
    env: 'AVS_AVERAGING_ALPHA',
    description: 'Step toward the group mean: local += alpha * (mean - local), above 0 and at most 1; 1 adopts the mean, 0 would never move and more than 1 overshoots it.',
    bound: { kind: 'number', min: 0, exclusiveMin: true, max: 1 },
    default: 1
  },
  compression: {
    env: 'AVS_COMPRESSION',
    description: 'Wire compression of tensor parts: none, float16, uniform8bit or blockwise8bit; auto lets each group take none or float16 per round, whichever its members measured faster (float16 halves the bytes on slow links, costs CPU on fast ones). When every member of a group landed the same earlier round whole, a lossy codec carries each member\'s change since that round\'s result instead of its values (delta rounds): the same mean, with the codec\'s error relative to the change; it costs each agent a float32 copy of that result.',
    bound: { kind: 'enum', values: COMPRESSIONS },
    default: 'none'
  },
  period: {
    env: 'AVS_PERIOD',
    description: 'How often each agent starts an averaging round (Go duration), 1s to 24h: a shorter period starts rounds faster than a group can form, a zero period spins; past 24h the swarm hardly averages.',
    bound: { kind: 'duration', min: '1s', max: '24h' },
    default: '30s'
  },
  dataThreads: {
    env: 'AVS_DATA_THREADS',
    description: 'Worker threads per agent that carry the direct data channel (TLS, framing), so one agent uses more than one core; give the agent as many more CPUs. 0 to 64; 0 keeps it on the main thread, best when agents already fill their cores.',
    bound: { kind: 'int', min: 0, max: 64 },
    default: 0
  },
  bandwidth: {
    env: 'AVS_BANDWIDTH',
    description: 'Declared bandwidth of each agent (any unit, the same for all) that sizes its share of the reduction; above 0 and at most 1e15 (a petabit per second in bit/s), so shares stay finite; unset means each agent declares the rate (bytes/s) its link carried in its recent rounds, and reduces an equal share until it has measured one.',
    bound: { kind: 'number', min: 0, exclusiveMin: true, max: 1e15 }
  }
} as const satisfies Record<string, AveragingParameter>

export type AveragingKey = keyof typeof AVERAGING_PARAMETERS
export const AVERAGING_KEYS = Object.keys(AVERAGING_PARAMETERS) as AveragingKey[]

/** Rules between two fields: CEL for the API server, `holds` for the local validator and the agent. */
export interface CrossRule {
  readonly field: AveragingKey
  readonly message: string
  readonly cel: string
  readonly holds: (a: Record<string, unknown>) => boolean
}

const dur = (k: string): string => `self.${k}.matches('${DURATION_PATTERN}')`

export const AVERAGING_RULES: readonly CrossRule[] = [
  {
    field: 'minGroupSize',
    message: 'minGroupSize must not exceed targetGroupSize',
    cel: 'self.minGroupSize <= self.targetGroupSize',
    holds: a => Number(a.minGroupSize) <= Number(a.targetGroupSize)
  },
  {
    field: 'requestTimeout',
    message: 'requestTimeout must be shorter than averagingExpiration',
    cel: `!${dur('requestTimeout')} || !${dur('averagingExpiration')} || duration(self.requestTimeout) < duration(self.averagingExpiration)`,
    holds: a => durationNanos(String(a.requestTimeout)) < durationNanos(String(a.averagingExpiration))
  }
]
