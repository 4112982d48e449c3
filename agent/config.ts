import { peerIdFromString } from '@libp2p/peer-id'
import { decodeSwarmKey } from './net/pnet/swarm-key.js'
import { readFileSync } from 'node:fs'
import { AGENT_ENV, type AgentEnvKey } from '../api/agent-env.js'
import { AVERAGING_KEYS, AVERAGING_PARAMETERS, type AveragingKey } from '../api/averaging-parameters.js'
import { CHECKPOINT_PARAMETERS } from '../api/checkpoint-parameters.js'
import { checkValue, formatRange, fromEnv, parseDuration, toAgent } from '../api/parameter-bounds.js'
import { validateConfig, DEFAULT_AVERAGER_CONFIG, type AveragerConfig, type AveragerMode } from './averager.js'
import { AveragingError, describeError } from './errors.js'
import { defaultKernelBackend, type KernelBackend } from './kernels/reduce-kernels.js'

export interface AgentConfig {
  readonly swarm: string
  readonly namespace: string
  readonly podName: string
  readonly podIP: string
  /** Protobuf-encoded private key, or undefined to generate one. */
  readonly identityKey?: Uint8Array
  readonly p2pPort: number
  readonly announceAddrs: readonly string[]
  /** AVS_ANNOUNCE_FILE: more addresses to announce, reread while the agent runs; undefined when unset. */
  readonly announceFile?: string
  readonly bootstrapPeers: readonly string[]
  readonly dnsServers: readonly string[]
  readonly psk?: Uint8Array
  /** Peer ids allowed to connect; empty: anyone (holding the private-network key, if one is set). */
  readonly allowPeers: readonly string[]
  readonly metricsPort: number
  readonly averager: AveragerConfig
  readonly period: number
  readonly workload: 'builtin' | 'sidecar'
  readonly sidecarPort: number
  /** AVS_SHM_DIR: where the sidecar trainer's shared-memory regions live; undefined when unset. */
  readonly shmDir?: string
  readonly shardIndex: number
  readonly logLevel: string
  /** AVS_CHECKPOINT_*: where and how often the swarm's averaged tensors are checkpointed; undefined: never. */
  readonly checkpoint?: CheckpointPolicy
  /** AVS_COMPLETION_ROUNDS: rounds after which the run is complete; undefined: it never is. */
  readonly completionRounds?: number
  /** AVS_COMPLETION_DEADLINE as unix milliseconds: the run ends at the first round ending after it. */
  readonly completionDeadline?: number
}

export interface CheckpointPolicy {
  readonly dir: string
  /** Rounds between checkpoints. */
  readonly every: number
  /** Newest complete checkpoints kept. */
  readonly keep: number
}

/** The bounds the CRD gives spec.checkpoint and spec.completion (api/checkpoint-parameters.ts). */
export const CHECKPOINT_EVERY_MAX = CHECKPOINT_PARAMETERS.every.bound.max
export const CHECKPOINT_KEEP_MAX = CHECKPOINT_PARAMETERS.keep.bound.max
export const COMPLETION_ROUNDS_MAX = CHECKPOINT_PARAMETERS.completionRounds.bound.max

/** Parses Go-style durations ("15s", "500ms", "1m30s", "2h") into seconds. */
export { parseDuration }

const DEFAULT_PERIOD_SECONDS = parseDuration(String(AVERAGING_PARAMETERS.period.default))

/**
 * Reads the agent's environment contract (api/agent-env.ts). Every bad value becomes one
 * sentence naming the variable; all of them are reported together.
 */
export function loadAgentConfig (env: NodeJS.ProcessEnv): AgentConfig {
  const problems: string[] = []
  const raw = (key: AgentEnvKey): string | undefined => {
    const spec = AGENT_ENV[key]
    const value = env[spec.name]
    if (value === undefined || value === '') {
      if ('required' in spec && spec.required === true) problems.push(`${spec.name} is required: ${spec.description}`)
      return 'default' in spec ? spec.default : undefined
    }
    return value
  }
  const parse = <T>(key: AgentEnvKey, fn: (s: string) => T, fallback: T): T => {
    const value = raw(key)
    if (value === undefined) return fallback
    try { return fn(value) } catch (err) { problems.push(`${AGENT_ENV[key].name}: ${describeError(err)}`); return fallback }
  }
  const integer = (min: number, max: number) => (s: string): number => {
    const n = Number(s)
    if (!Number.isInteger(n) || n < min || n > max) throw new Error(`"${s}" is not an integer from ${min} to ${max}`)
    return n
  }
  const list = (s: string): string[] => s.split(',').map(x => x.trim()).filter(x => x.length > 0)
  const oneOf = <T extends string>(...allowed: T[]) => (s: string): T => {
    if (!(allowed as string[]).includes(s)) throw new Error(`"${s}" is not one of ${allowed.join(', ')}`)
    return s as T
  }

  const podName = raw('podName') ?? ''
  // The averaging parameters, each checked against the same bound the CRD enforces.
  const averaging: Partial<Record<AveragingKey, string | number>> = {}
  for (const k of AVERAGING_KEYS) {
    const text = raw(k)
    if (text === undefined) continue
    const bound = AVERAGING_PARAMETERS[k].bound
    const v = fromEnv(bound, text)
    if (checkValue(bound, v) !== undefined) problems.push(`${AGENT_ENV[k].name}: "${text}" is not ${formatRange(bound)} (spec.averaging.${k})`)
    else averaging[k] = toAgent(bound, v)
  }
  const { period = DEFAULT_PERIOD_SECONDS, ...averagingValues } = averaging
  const averager: AveragerConfig = {
    ...DEFAULT_AVERAGER_CONFIG,
    ...(averagingValues as Partial<AveragerConfig>),
    prefix: String(averaging.prefix ?? ''),
    mode: parse('mode', oneOf<AveragerMode>('node', 'client', 'auxiliary'), 'node'),
    dataChannel: parse('dataChannel', oneOf('direct', 'libp2p'), 'direct'),
    dataHost: raw('podIP') ?? '0.0.0.0',
    dataPort: parse('dataPort', integer(0, 65535), 0),
    kernels: parse('kernels', oneOf<KernelBackend>('wasm-simd', 'js'), defaultKernelBackend())
  }
  if (problems.length === 0) {
    try { validateConfig(averager) } catch (err) { problems.push(describeError(err)) }
  }
  const pskFile = raw('pskFile')
  let psk: Uint8Array | undefined
  if (pskFile !== undefined) {
    try { psk = readFileSync(pskFile) } catch (err) { problems.push(`${AGENT_ENV.pskFile.name}: cannot read ${pskFile}: ${describeError(err)}`) }
    if (psk !== undefined) {
      try { decodeSwarmKey(psk) } catch (err) { problems.push(`${AGENT_ENV.pskFile.name}: ${describeError(err)}`) }
    }
  }
  const identity = raw('identityKey')
  let identityKey: Uint8Array | undefined
  if (identity !== undefined) {
    identityKey = new Uint8Array(Buffer.from(identity, 'base64'))
    if (identityKey.byteLength < 32 || identityKey.byteLength > 256) problems.push(`${AGENT_ENV.identityKey.name} is not a base64 protobuf private key`)
  }
  const ordinal = shardFromPodName(podName)
  const checkpointDir = raw('checkpointDir')
  const checkpoint: CheckpointPolicy | undefined = checkpointDir === undefined
    ? undefined
    : {
        dir: checkpointDir,
        every: parse('checkpointEvery', integer(CHECKPOINT_PARAMETERS.every.bound.min, CHECKPOINT_EVERY_MAX), CHECKPOINT_PARAMETERS.every.default),
        keep: parse('checkpointKeep', integer(CHECKPOINT_PARAMETERS.keep.bound.min, CHECKPOINT_KEEP_MAX), CHECKPOINT_PARAMETERS.keep.default)
      }
  const completionDeadline = parse<number | undefined>('completionDeadline', (s) => {
    const ms = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/.test(s) ? Date.parse(s) : NaN
    if (!Number.isFinite(ms)) throw new Error(`"${s}" is not an RFC 3339 time such as 2026-11-24T18:00:00Z`)
    return ms
  }, undefined)
  const completionRounds = parse<number | undefined>('completionRounds', integer(CHECKPOINT_PARAMETERS.completionRounds.bound.min, COMPLETION_ROUNDS_MAX), undefined)
  const config: AgentConfig = {
    swarm: raw('swarm') ?? '',
    namespace: raw('namespace') ?? 'default',
    podName,
    podIP: raw('podIP') ?? '0.0.0.0',
    identityKey,
    p2pPort: parse('p2pPort', integer(0, 65535), 31337),
    announceAddrs: parse('announceAddrs', list, []),
    announceFile: raw('announceFile'),
    bootstrapPeers: parse('bootstrapPeers', list, []),
    dnsServers: parse('dnsServers', list, []),
    psk,
    allowPeers: parse('allowPeers', (s) => list(s).map(id => { try { return peerIdFromString(id).toString() } catch { throw new Error(`"${id}" is not a libp2p peer id`) } }), []),
    metricsPort: parse('metricsPort', integer(0, 65535), 9400),
    averager,
    period: Number(period),
    workload: parse('workload', oneOf('builtin', 'sidecar'), 'builtin'),
    sidecarPort: parse('sidecarPort', integer(0, 65535), 9401),
    shmDir: raw('shmDir'),
    shardIndex: parse('shardIndex', integer(0, 1_000_000), ordinal),
    logLevel: parse('logLevel', oneOf('trace', 'debug', 'info', 'warn', 'error'), 'info'),
    ...(checkpoint === undefined ? {} : { checkpoint }),
    ...(completionRounds === undefined ? {} : { completionRounds }),
    ...(completionDeadline === undefined ? {} : { completionDeadline })
  }
  if (problems.length > 0) throw new AveragingError(problems.join('\n'))
  return config
}

/**
 * The builtin workload's data shard from the pod name, when AVS_SHARD_INDEX is unset: bootstrap
 * agent i (`<swarm>-bootstrap-<i>-0`) takes shard i, regular agent n (`<swarm>-agent-<n>`) takes
 * shard 64 + n, so no two pods of a swarm share a shard.
 */
export function shardFromPodName (podName: string): number {
  const bootstrap = /-bootstrap-(\d+)-\d+$/.exec(podName)
  if (bootstrap != null) return Number(bootstrap[1])
  const ordinal = /-(\d+)$/.exec(podName)
  return ordinal != null ? 64 + Number(ordinal[1]) : 0
}
