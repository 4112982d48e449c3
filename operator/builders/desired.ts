/**
 * The whole desired state of one swarm: every object it should own, computed from the spec and
 * the few facts read from the cluster (existing key Secrets, whether PodMonitor exists). Pure:
 * no I/O, the same inputs always give the same objects.
 */
import type { AveragingSwarm } from '../../api/v1alpha1/types.js'
import type { KubeObj } from '../objects.js'
import type { BuilderConfig } from './config.js'
import { buildConfigMap, configData } from './configmap.js'
import { shortHash } from './hash.js'
import { bootstrapMultiaddrs, buildIdentitySecret, peerIdOf, type SecretData } from './identity.js'
import { names } from './names.js'
import { buildPdb } from './pdb.js'
import { buildPodMonitor } from './podmonitor.js'
import { buildPskSecret } from './psk.js'
import { buildService } from './service.js'
import { buildStatefulSet, roleReplicas } from './statefulset.js'
import { buildAgentService, buildAnnounceConfigMap, exposedPods, exposeTypeOf, exposure } from './expose.js'
import { reachableByPod, type ReachableInputs } from './reachable.js'
import { buildMembersConfigMap, followsGrid } from './members.js'

/** Moved to operator/objects.ts (shared with the I/O layer); re-exported for cli/local. */
export type { KubeObj }

export interface DesiredInputs {
  config: BuilderConfig
  /** Identity Secret data with a key for each bootstrap agent (see ensureIdentityKeys). */
  identityData: SecretData
  podMonitorAvailable: boolean
  /** Data of the PSK Secret to create, only when the spec asks to generate it and the swarm owns it. */
  pskData?: SecretData
  /** The checkpoint claim or S3 Secret does not exist (yet): the pods are built without checkpoints. */
  checkpointStoreMissing?: boolean
  /** Pods, Nodes and per-agent Services as observed, for the addresses of an exposed swarm (reachable.ts). */
  observed?: ReachableInputs
}

const NOTHING_OBSERVED: ReachableInputs = { pods: new Map(), nodes: new Map(), services: new Map() }

export interface Desired {
  objects: KubeObj[]
  /**
   * Multiaddrs of the swarm's own bootstrap agents for status.bootstrapPeers: the in-cluster /dns4
   * names, or for an exposed swarm the reachable addresses known so far (never in-cluster names,
   * which another cluster cannot resolve, or could resolve to a look-alike swarm).
   */
  bootstrapPeers: string[]
}

export function buildDesired (s: AveragingSwarm, inp: DesiredInputs): Desired {
  const nb = s.spec.bootstrap.replicas
  const own = bootstrapMultiaddrs(s, inp.identityData, nb, inp.config.clusterDomain)
  const external = s.spec.bootstrap.peers
  const configHash = shortHash({ config: configData(s), psk: s.spec.network.privateNetworkSecret ?? null })
  const r = roleReplicas(s)
  const objects: KubeObj[] = [buildService(s), buildIdentitySecret(s, inp.identityData), buildConfigMap(s)]
  if (followsGrid(s, 'agent')) objects.push(buildMembersConfigMap(s))
  if (inp.pskData !== undefined) objects.push(buildPskSecret(s, inp.pskData))
  for (let i = 0; i < nb; i++) {
    objects.push(buildStatefulSet(s, names.bootstrapSet(s, i), r.bootstrap(i), {
      role: 'bootstrap', bootstrapIndex: i, bootstrapPeers: [...own.filter((_, j) => j !== i), ...external], configHash, config: inp.config, checkpointStoreMissing: inp.checkpointStoreMissing
    }))
  }
  const peers = [...own, ...external]
  objects.push(buildStatefulSet(s, names.agentSet(s), r.agent, { role: 'agent', bootstrapPeers: peers, configHash, config: inp.config, checkpointStoreMissing: inp.checkpointStoreMissing }))
  if (s.spec.auxiliary.replicas > 0) {
    objects.push(buildStatefulSet(s, names.auxiliarySet(s), r.auxiliary, { role: 'auxiliary', bootstrapPeers: peers, configHash, config: inp.config, checkpointStoreMissing: inp.checkpointStoreMissing }))
  }
  objects.push(buildPdb(s))
  if (inp.podMonitorAvailable && s.spec.metrics.podMonitor) objects.push(buildPodMonitor(s))
  if (exposure(s) === undefined) return { objects: objects as KubeObj[], bootstrapPeers: own }
  const exposed = exposedPods(s, r)
  for (const p of exposed) if (exposeTypeOf(s, p.role) !== 'HostPort') objects.push(buildAgentService(s, p))
  const reachable = reachableByPod(s, exposed, inp.observed ?? NOTHING_OBSERVED)
  objects.push(buildAnnounceConfigMap(s, reachable))
  const published = Array.from({ length: nb }, (_, i) => (reachable.get(names.bootstrapPod(s, i))?.p2p ?? []).map(a => `${a}/p2p/${peerIdOf(inp.identityData, i)}`)).flat()
  return { objects: objects as KubeObj[], bootstrapPeers: published }
}
