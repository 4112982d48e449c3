import { peerIdFromString } from '@libp2p/peer-id'
import { decodeSwarmKey } from './net/pnet/swarm-key.js'
import { readFileSync } from 'node:fs'
import { AGENT_ENV, type AgentEnvKey } from '../api/agent-env.js'
import { isCompressionName, type CompressionName } from './compression/index.js'
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
}

/** Parses Go-style durations ("15s", "500ms", "1m30s", "2h") into seconds. */
export function parseDuration (text: string): number {
  const units: Record<string, number> = { h: 3600, m: 60, s: 1, ms: 0.001, us: 1e-6, µs: 1e-6, ns: 1e-9 }
  const re = /(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)/gy
  let total = 0
  let matched = 0
  let m: RegExpExecArray | null
  while ((m = re.exec(text)) !== null) { total += Number(m[1]) * units[m[2]]; matched += m[0].length }
  if (text.length === 0 || matched !== text.length) throw new Error(`"${text}" is not a duration such as 15s, 500ms or 1m30s`)
  return total
}

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
  const number = (s: string): number => {
    const n = Number(s)
    if (!Number.isFinite(n)) throw new Error(`"${s}" is not a number`)
    return n
  }
  const list = (s: string): string[] => s.split(',').map(x => x.trim()).filter(x => x.length > 0)
  const oneOf = <T extends string>(...allowed: T[]) => (s: string): T => {
    if (!(allowed as string[]).includes(s)) throw new Error(`"${s}" is not one of ${allowed.join(', ')}`)
    return s as T
  }

  const podName = raw('podName') ?? ''
  const compression = parse('compression', (s): CompressionName => { if (!isCompressionName(s)) throw new Error(`"${s}" is not one of none, float16, uniform8bit, blockwise8bit`); return s }, 'none')
  const bandwidthText = raw('bandwidth')
  const averager: AveragerConfig = {
    ...DEFAULT_AVERAGER_CONFIG,
    prefix: raw('prefix') ?? '',
    targetGroupSize: parse('targetGroupSize', integer(2, 1024), 4),
    minGroupSize: parse('minGroupSize', integer(2, 1024), 2),
    initialGroupBits: raw('initialGroupBits') ?? '',
    averagingExpiration: parse('averagingExpiration', parseDuration, 15),
    requestTimeout: parse('requestTimeout', parseDuration, 3),
    allreduceTimeout: parse('allreduceTimeout', parseDuration, 60),
    partSizeBytes: parse('partSizeBytes', integer(1024, 4 * 1024 * 1024), 65536),
    averagingAlpha: parse('averagingAlpha', number, 1),
    compression,
    mode: parse('mode', oneOf<AveragerMode>('node', 'client', 'auxiliary'), 'node'),
    bandwidth: bandwidthText !== undefined ? parse('bandwidth', number, undefined as unknown as number) : undefined,
    dataChannel: parse('dataChannel', oneOf('direct', 'libp2p'), 'direct'),
    dataHost: raw('podIP') ?? '0.0.0.0',
    dataPort: parse('dataPort', integer(0, 65535), 0),
    dataThreads: parse('dataThreads', integer(0, 64), 0),
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
  const config: AgentConfig = {
    swarm: raw('swarm') ?? '',
    namespace: raw('namespace') ?? 'default',
    podName,
    podIP: raw('podIP') ?? '0.0.0.0',
    identityKey,
    p2pPort: parse('p2pPort', integer(0, 65535), 31337),
    announceAddrs: parse('announceAddrs', list, []),
    bootstrapPeers: parse('bootstrapPeers', list, []),
    dnsServers: parse('dnsServers', list, []),
    psk,
    allowPeers: parse('allowPeers', (s) => list(s).map(id => { try { return peerIdFromString(id).toString() } catch { throw new Error(`"${id}" is not a libp2p peer id`) } }), []),
    metricsPort: parse('metricsPort', integer(0, 65535), 9400),
    averager,
    period: parse('period', parseDuration, 30),
    workload: parse('workload', oneOf('builtin', 'sidecar'), 'builtin'),
    sidecarPort: parse('sidecarPort', integer(0, 65535), 9401),
    shmDir: raw('shmDir'),
    shardIndex: parse('shardIndex', integer(0, 1_000_000), ordinal),
    logLevel: parse('logLevel', oneOf('trace', 'debug', 'info', 'warn', 'error'), 'info')
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
