import { peerIdFromString } from '@libp2p/peer-id'
import { privateKeyFromProtobuf } from '@libp2p/crypto/keys'
import { multiaddr } from '@multiformats/multiaddr'
import { decodeSwarmKey } from './net/pnet/swarm-key.js'
import { readFileSync } from 'node:fs'
import { AGENT_ENV, type AgentEnvKey } from '../api/agent-env.js'
import { AVERAGING_KEYS, AVERAGING_PARAMETERS, type AveragingKey } from '../api/averaging-parameters.js'
import { CHECKPOINT_INTERVAL, CHECKPOINT_PARAMETERS } from '../api/checkpoint-parameters.js'
import { DEFAULT_RELAY_CIRCUIT_DURATION, RELAY_CIRCUIT_DURATION, RELAY_CIRCUIT_MIB, RELAY_MAX_RESERVATIONS } from '../api/relay-parameters.js'
import type { CheckpointStoreConfig } from './checkpoint/store.js'
import { checkSwarmName } from './checkpoint/manifest.js'
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
  /** AVS_MEMBERS_DIR: the swarm's membership (members, bootstrap), for the Moshpit grid; undefined when unset. */
  readonly membersDir?: string
  readonly bootstrapPeers: readonly string[]
  readonly dnsServers: readonly string[]
  readonly psk?: Uint8Array
  /** Peer ids allowed to connect; empty: anyone (holding the private-network key, if one is set). */
  readonly allowPeers: readonly string[]
  readonly metricsPort: number
  /** AVS_RELAY*: the relay hop service this agent runs for members; undefined: none. */
  readonly relay?: RelayServeLimits
  /** AVS_REACHABILITY: auto detects NAT after joining; public and private decide it. */
  readonly reachability: Reachability
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
  /** AVS_COMPLETION_ON_TRAINER_EXIT: the run ends once the sidecar's trainer says it has finished. */
  readonly completionOnTrainerExit: boolean
  /** AVS_TERMINATION_GRACE_SECONDS: how long after SIGTERM the agent is killed (a round still running hands its span off before). */
  readonly terminationGraceSeconds: number
}

export type Reachability = 'auto' | 'public' | 'private'

export interface RelayServeLimits {
  readonly maxReservations: number
  /** Bytes one relayed connection may carry, both directions together. */
  readonly circuitBytes: number
  readonly circuitDurationMs: number
}

export interface CheckpointPolicy {
  /** A folder (AVS_CHECKPOINT_DIR) or a bucket (AVS_CHECKPOINT_S3_*). */
  readonly store: CheckpointStoreConfig
  /** AVS_RESTORE_FROM_*: another swarm's checkpoint in the same store to start from. */
  readonly restoreFrom?: { readonly swarm: string, readonly round?: number }
  /** Rounds between checkpoints. */
  readonly every: number
  /** AVS_CHECKPOINT_INTERVAL in ms: a round is also written once this long has passed since the newest checkpoint. */
  readonly intervalMs?: number
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
  const multiaddrs = (field: string) => (s: string): string[] => list(s).map(a => { checkMultiaddr(a, field); return a })
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
    // An agent's peer id is what other agents name it by in spec.bootstrap.peers, whose pattern
    // admits Ed25519 peer ids only (api/v1alpha1/address-patterns.ts).
    let type: string | undefined
    try { type = identityKey.byteLength <= 256 ? privateKeyFromProtobuf(identityKey).type : undefined } catch {}
    if (type === undefined) problems.push(`${AGENT_ENV.identityKey.name} is not a base64 protobuf libp2p private key`)
    else if (type !== 'Ed25519') problems.push(`${AGENT_ENV.identityKey.name} is a key of type ${type}; an agent's key is Ed25519`)
  }
  // Bounds from api/relay-parameters.ts, the CRD's (spec.network.relay).
  const relay: RelayServeLimits | undefined = parse('relay', oneOf('serve', 'off'), 'off') === 'serve'
    ? {
        maxReservations: parse('relayMaxReservations', integer(RELAY_MAX_RESERVATIONS.min, RELAY_MAX_RESERVATIONS.max), RELAY_MAX_RESERVATIONS.default),
        circuitBytes: parse('relayCircuitMiB', integer(RELAY_CIRCUIT_MIB.min, RELAY_CIRCUIT_MIB.max), RELAY_CIRCUIT_MIB.default) * 1024 * 1024,
        circuitDurationMs: parse('relayCircuitDuration', (s) => {
          const seconds = parseDuration(s)
          if (checkValue(RELAY_CIRCUIT_DURATION, s) !== undefined) throw new Error(`"${s}" is not ${formatRange(RELAY_CIRCUIT_DURATION)}`)
          return seconds * 1000
        }, parseDuration(DEFAULT_RELAY_CIRCUIT_DURATION) * 1000)
      }
    : undefined
  const ordinal = shardFromPodName(podName)
  const checkpointDir = raw('checkpointDir')
  const bucket = raw('checkpointS3Bucket')
  let store: CheckpointStoreConfig | undefined
  if (bucket !== undefined) {
    const accessKeyId = env.AWS_ACCESS_KEY_ID ?? ''
    const secretAccessKey = env.AWS_SECRET_ACCESS_KEY ?? ''
    if (accessKeyId === '' || secretAccessKey === '') problems.push(`${AGENT_ENV.checkpointS3Bucket.name} is set, but AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (the bucket's credentials, from spec.checkpoint.s3.secretRef) are not`)
    const endpoint = parse<string | undefined>('checkpointS3Endpoint', (s) => {
      if (!/^https?:\/\/[^\s/?#]+(\/[^\s?#]*)?$/.test(s)) throw new Error(`"${s}" is not an http(s) URL such as https://s3.example.com:9000`)
      return s
    }, undefined)
    const sessionToken = env.AWS_SESSION_TOKEN
    store = {
      kind: 's3',
      bucket,
      region: raw('checkpointS3Region') ?? 'us-east-1',
      prefix: raw('checkpointS3Prefix'),
      forcePathStyle: parse('checkpointS3PathStyle', (s) => oneOf('true', 'false')(s) === 'true', false),
      ...(endpoint === undefined ? {} : { endpoint }),
      credentials: { accessKeyId, secretAccessKey, ...(sessionToken === undefined || sessionToken === '' ? {} : { sessionToken }) }
    }
    if (checkpointDir !== undefined) problems.push(`${AGENT_ENV.checkpointDir.name} and ${AGENT_ENV.checkpointS3Bucket.name} are both set: checkpoints go to a folder or a bucket, not both`)
  } else if (checkpointDir !== undefined) {
    store = { kind: 'folder', dir: checkpointDir }
  }
  const intervalMs = parse<number | undefined>('checkpointInterval', (s) => {
    const why = checkValue(CHECKPOINT_INTERVAL, s)
    if (why !== undefined) throw new Error(`"${s}" is not ${formatRange(CHECKPOINT_INTERVAL)} (spec.checkpoint.interval)`)
    return parseDuration(s) * 1000
  }, undefined)
  const restoreSwarm = raw('restoreFromSwarm')
  const restoreRound = parse<number | undefined>('restoreFromRound', integer(CHECKPOINT_PARAMETERS.restoreFromRound.bound.min, CHECKPOINT_PARAMETERS.restoreFromRound.bound.max), undefined)
  if (restoreSwarm !== undefined && store === undefined) problems.push(`${AGENT_ENV.restoreFromSwarm.name} needs a checkpoint store (${AGENT_ENV.checkpointDir.name} or ${AGENT_ENV.checkpointS3Bucket.name}): the checkpoint is read from there`)
  if (restoreSwarm !== undefined) { try { checkSwarmName(restoreSwarm) } catch (err) { problems.push(`${AGENT_ENV.restoreFromSwarm.name}: ${describeError(err)}`) } }
  if (restoreRound !== undefined && restoreSwarm === undefined) problems.push(`${AGENT_ENV.restoreFromRound.name} needs ${AGENT_ENV.restoreFromSwarm.name}`)
  const checkpoint: CheckpointPolicy | undefined = store === undefined
    ? undefined
    : {
        store,
        every: parse('checkpointEvery', integer(CHECKPOINT_PARAMETERS.every.bound.min, CHECKPOINT_EVERY_MAX), CHECKPOINT_PARAMETERS.every.default),
        keep: parse('checkpointKeep', integer(CHECKPOINT_PARAMETERS.keep.bound.min, CHECKPOINT_KEEP_MAX), CHECKPOINT_PARAMETERS.keep.default),
        ...(intervalMs === undefined ? {} : { intervalMs }),
        ...(restoreSwarm === undefined ? {} : { restoreFrom: { swarm: restoreSwarm, ...(restoreRound === undefined ? {} : { round: restoreRound }) } })
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
    announceAddrs: parse('announceAddrs', multiaddrs('derived by the operator from spec.network.expose'), []),
    announceFile: raw('announceFile'),
    membersDir: raw('membersDir'),
    bootstrapPeers: parse('bootstrapPeers', multiaddrs('spec.bootstrap.peers, or the swarm\'s own bootstrap agents'), []),
    dnsServers: parse('dnsServers', list, []),
    psk,
    allowPeers: parse('allowPeers', (s) => list(s).map(id => { try { return peerIdFromString(id).toString() } catch { throw new Error(`"${id}" is not a libp2p peer id`) } }), []),
    metricsPort: parse('metricsPort', integer(0, 65535), 9400),
    ...(relay === undefined ? {} : { relay }),
    reachability: parse('reachability', oneOf<Reachability>('auto', 'public', 'private'), 'auto'),
    averager,
    period: Number(period),
    workload: parse('workload', oneOf('builtin', 'sidecar'), 'builtin'),
    sidecarPort: parse('sidecarPort', integer(0, 65535), 9401),
    shmDir: raw('shmDir'),
    shardIndex: parse('shardIndex', integer(0, 1_000_000), ordinal),
    logLevel: parse('logLevel', oneOf('trace', 'debug', 'info', 'warn', 'error'), 'info'),
    ...(checkpoint === undefined ? {} : { checkpoint }),
    ...(completionRounds === undefined ? {} : { completionRounds }),
    ...(completionDeadline === undefined ? {} : { completionDeadline }),
    completionOnTrainerExit: parse('completionOnTrainerExit', (s) => oneOf('true', 'false')(s) === 'true', false),
    terminationGraceSeconds: parse('terminationGrace', integer(0, 3600), 30)
  }
  if (problems.length > 0) throw new AveragingError(problems.join('\n'))
  return config
}

/**
 * A multiaddr the agent can dial or announce as given, with the peer id it names (if any) a real
 * one; otherwise why not, naming where the value came from. Without this check a typo (a port
 * above 65535, a bad IPv4 address) kept the agent retrying its bootstrap peers forever, with a
 * warning, and AVS_ANNOUNCE_ADDRS failed the agent with "Value must be an integer".
 */
function checkMultiaddr (text: string, from: string): void {
  let peer: string | undefined
  try {
    peer = multiaddr(text).getComponents().findLast(c => c.name === 'p2p')?.value
  } catch (err) {
    throw new Error(`"${text}" is not a libp2p multiaddr (${describeError(err)}; ${from})`)
  }
  if (peer === undefined) return
  try { peerIdFromString(peer) } catch { throw new Error(`"${text}" does not end in a valid libp2p peer id (${from})`) }
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
