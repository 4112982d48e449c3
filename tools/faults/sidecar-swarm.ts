import { randomUUID } from 'node:crypto'
import { validateSwarm } from '../../api/v1alpha1/validate.js'
import { withDefaults, type AveragingSwarm } from '../../api/v1alpha1/index.js'
import { buildDesired } from '../../operator/builders/desired.js'
import { ensureIdentityKeys } from '../../operator/builders/identity.js'
import { DEFAULT_BUILDER_CONFIG } from '../../operator/builders/config.js'
import { expandPods, writeMembersMount, type LocalPod } from '../../cli/local/pods.js'
import { AGENT_ENV } from '../../api/agent-env.js'
import { agentEnv } from '../../agent/process/agent-process.js'

/** The averaging settings of a reliability run (durations in seconds). */
export interface SwarmTiming {
  readonly targetGroupSize: number
  readonly minGroupSize: number
  readonly averagingExpiration: number
  readonly requestTimeout: number
  readonly allreduceTimeout: number
}

/** One agent of a reliability run: the pod the operator would build, placed on an address we chose. */
export interface SwarmAgent extends LocalPod {
  readonly index: number
  /** Loopback port of the agent's sidecar API (one per agent, as each pod has its own loopback). */
  readonly sidecarPort: number
}

export interface SidecarSwarmOptions {
  readonly name: string
  readonly replicas: number
  readonly bootstrapReplicas: number
  readonly timing: SwarmTiming
  /** The address of agent i. */
  readonly ips: readonly string[]
  /** The sidecar port of agent i. */
  readonly sidecarPorts: readonly number[]
  readonly p2pPort: number
  readonly metricsPort: number
  /** host:port of a DNS server answering the bootstrap names; without it /dns4 names become /ip4 addresses. */
  readonly dnsServer?: string
  /**
   * A folder that stands in for the members ConfigMap's mount: the operator's files are written
   * there, so the agents lay out the Moshpit grid as they do in a cluster.
   */
  readonly membersDir: string
  /** The swarm's spec.logLevel (default: the CRD's, info): debug shows matchmaking's and the all-reduce's decisions. */
  readonly logLevel?: string
  /** spec.podTemplate.terminationGracePeriodSeconds (default: unset, Kubernetes' 30 s). */
  readonly terminationGraceSeconds?: number
}

/**
 * Builds a sidecar swarm's agents with the operator's own builders (validated CRD object, the
 * same env, bootstrap identities from the identity Secret), then places agent i on ips[i]. The
 * trainer container is the run's own driver, so its image is a placeholder that never runs.
 */
export async function buildSidecarSwarm (o: SidecarSwarmOptions): Promise<{ swarm: AveragingSwarm, agents: SwarmAgent[], dnsRecords: Map<string, string> }> {
  const t = o.timing
  const object = {
    apiVersion: 'averaging.swarm.io/v1alpha1',
    kind: 'AveragingSwarm',
    metadata: { name: o.name, namespace: 'default' },
    spec: {
      replicas: o.replicas,
      ...(o.logLevel !== undefined ? { logLevel: o.logLevel } : {}),
      ...(o.terminationGraceSeconds !== undefined ? { podTemplate: { terminationGracePeriodSeconds: o.terminationGraceSeconds } } : {}),
      network: { port: o.p2pPort },
      metrics: { port: o.metricsPort },
      averaging: {
        targetGroupSize: t.targetGroupSize,
        minGroupSize: t.minGroupSize,
        averagingExpiration: `${t.averagingExpiration}s`,
        requestTimeout: `${t.requestTimeout}s`,
        allreduceTimeout: `${t.allreduceTimeout}s`
      },
      bootstrap: { replicas: o.bootstrapReplicas },
      workload: { type: 'sidecar', trainer: { image: 'reliability-driver' } }
    }
  }
  const problems = validateSwarm(object)
  if (problems.length > 0) throw new Error(`the run's swarm is not a valid AveragingSwarm: ${problems.join('; ')}`)
  const swarm = { ...object, metadata: { ...object.metadata, uid: randomUUID() }, spec: withDefaults(object.spec as never) } as unknown as AveragingSwarm
  const identity = await ensureIdentityKeys(undefined, o.bootstrapReplicas)
  const desired = buildDesired(swarm, {
    config: { ...DEFAULT_BUILDER_CONFIG, ...(o.dnsServer !== undefined ? { agentDnsServers: o.dnsServer } : {}) },
    identityData: identity,
    podMonitorAvailable: false
  })
  const pods = expandPods(desired.objects, 'default', DEFAULT_BUILDER_CONFIG.clusterDomain)
  if (pods.length !== o.replicas) throw new Error(`the builders made ${pods.length} pods for ${o.replicas} replicas`)
  if (o.ips.length < pods.length || o.sidecarPorts.length < pods.length) throw new Error('every agent needs an address and a sidecar port')
  writeMembersMount(o.membersDir, swarm)
  const dnsRecords = new Map<string, string>()
  pods.forEach((p, i) => { dnsRecords.set(p.hostname, o.ips[i]) })
  const agents = pods.map((p, i): SwarmAgent => {
    const env: Record<string, string> = {
      ...p.env,
      ...agentEnv({ podIP: o.ips[i], sidecarPort: o.sidecarPorts[i] }),
      ...(p.env[AGENT_ENV.membersDir.name] === undefined ? {} : agentEnv({ membersDir: o.membersDir }))
    }
    const bootstrap = AGENT_ENV.bootstrapPeers.name
    if (o.dnsServer === undefined && env[bootstrap] !== undefined) {
      env[bootstrap] = env[bootstrap].replace(/\/dns4\/([^/]+)\//g, (_m, host: string) => `/ip4/${dnsRecords.get(host.toLowerCase()) ?? host}/`)
    }
    return { ...p, index: i, ip: o.ips[i], env, sidecarPort: o.sidecarPorts[i] }
  })
  return { swarm, agents, dnsRecords }
}
