/**
 * The ConfigMap with the swarm's averaging configuration as agent environment variables; the
 * pods read it through configMapKeyRef and carry its hash, so a change rolls them.
 */
import { AGENT_ENV, type AgentEnvKey } from '../../api/agent-env.js'
import type { V1ConfigMap } from '@kubernetes/client-node'
import type { AveragingSwarm } from '../../api/v1alpha1/types.js'
import { names } from './names.js'
import { parseDuration } from '../../api/parameter-bounds.js'
import { ownedMeta } from './owner.js'

/** Agent variables that come from the ConfigMap (shared by every agent of the swarm). */
export const CONFIG_KEYS = [
  'prefix', 'targetGroupSize', 'minGroupSize', 'initialGroupBits', 'averagingExpiration', 'requestTimeout',
  'allreduceTimeout', 'partSizeBytes', 'averagingAlpha', 'compression', 'period', 'bandwidth', 'dataThreads',
  'checkpointEvery', 'checkpointKeep', 'checkpointInterval', 'completionRounds', 'completionDeadline'
] as const satisfies readonly AgentEnvKey[]
export type ConfigKey = (typeof CONFIG_KEYS)[number]

/**
 * Keys of the optional sections: in the ConfigMap, and referenced by the pods, only when the spec
 * has the section, so a swarm without them (and every swarm made before they existed) keeps
 * exactly its ConfigMap and pod template: an operator upgrade rolls no agent.
 */
export const SECTION_KEYS: readonly ConfigKey[] = ['checkpointEvery', 'checkpointKeep', 'checkpointInterval', 'completionRounds', 'completionDeadline']

/** spec.completion.duration counted from the swarm's creation (the API server sets creationTimestamp), in RFC 3339. */
export function completionDeadline (created: string | undefined, duration: string): string | undefined {
  const start = created === undefined ? NaN : Date.parse(created)
  if (!Number.isFinite(start)) return undefined
  return new Date(start + parseDuration(duration) * 1000).toISOString().replace(/\.\d+Z$/, 'Z')
}

/** hivemind prefix default: <namespace>_<name>; dots are not allowed in it. */
export function defaultPrefix (s: AveragingSwarm): string {
  return `${s.metadata.namespace ?? 'default'}_${s.metadata.name}`.replaceAll('.', '-')
}

export function configData (s: AveragingSwarm): Record<string, string> {
  const a = s.spec.averaging
  const { checkpoint, completion } = s.spec
  const values: Record<ConfigKey, string | undefined> = {
    prefix: a.prefix ?? defaultPrefix(s),
    targetGroupSize: String(a.targetGroupSize),
    minGroupSize: String(a.minGroupSize),
    initialGroupBits: a.initialGroupBits,
    averagingExpiration: a.averagingExpiration,
    requestTimeout: a.requestTimeout,
    allreduceTimeout: a.allreduceTimeout,
    partSizeBytes: String(a.partSizeBytes),
    averagingAlpha: String(a.averagingAlpha),
    compression: a.compression,
    period: a.period,
    bandwidth: a.bandwidth === undefined ? undefined : String(a.bandwidth),
    dataThreads: String(a.dataThreads),
    checkpointEvery: checkpoint === undefined ? undefined : String(checkpoint.every),
    checkpointKeep: checkpoint === undefined ? undefined : String(checkpoint.keep),
    checkpointInterval: checkpoint?.interval,
    completionRounds: completion?.rounds === undefined ? undefined : String(completion.rounds),
    completionDeadline: completion?.duration === undefined ? undefined : completionDeadline(s.metadata.creationTimestamp, completion.duration)
  }
  const data: Record<string, string> = {}
  for (const k of CONFIG_KEYS) { const v = values[k]; if (v !== undefined) data[AGENT_ENV[k].name] = v }
  return data
}

export function buildConfigMap (s: AveragingSwarm) {
  return { apiVersion: 'v1', kind: 'ConfigMap', metadata: ownedMeta(s, names.configMap(s)), data: configData(s) } satisfies V1ConfigMap
}
