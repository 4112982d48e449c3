/**
 * Objects and pod settings of spec.network.expose. Pure: which agents are exposed how,
 * their per-agent Services, the announce ConfigMap. The addresses themselves are derived from
 * what the API reports (reachable.ts), because node addresses, node ports and load-balancer
 * ingress are only known once the cluster assigned them.
 *
 * Why per-agent Services select `statefulset.kubernetes.io/pod-name`: every agent is its own
 * libp2p peer; a Service spreading connections over several agents would hand a dialler
 * a peer id other than the one it asked for.
 */
import type { V1ConfigMap, V1Service } from '@kubernetes/client-node'
import type { AveragingSwarm, ExposeSpec, ExposeType } from '../../api/v1alpha1/types.js'
import { names, type Role } from './names.js'
import { ownedMeta } from './owner.js'
import type { Reachable } from './reachable.js'
import { ANNOUNCE_DATA_PREFIX } from '../../api/agent-env.js'

export const LABEL_POD_NAME = 'statefulset.kubernetes.io/pod-name'
/** Labels the per-agent Services carry besides the swarm's, so that they are told from the headless one. */
export const LABEL_EXPOSED_POD = 'averaging.swarm.io/exposed-pod'
/** Where the announce ConfigMap is mounted; the agent reads <dir>/<pod name> (AVS_ANNOUNCE_FILE). */
export const ANNOUNCE_MOUNT_DIR = '/etc/averaging-swarm/announce'
export const ANNOUNCE_VOLUME = 'avs-announce'

/** The expose section when agents are exposed at all; undefined for None or absent (today's pods exactly). */
export function exposure (s: AveragingSwarm): ExposeSpec | undefined {
  const e = s.spec.network.expose
  return e === undefined || e.type === 'None' ? undefined : e
}

/**
 * How one role's agents are reached. LoadBalancer costs a cloud load balancer per Service, so it
 * is for the bootstrap agents (the swarm's published entry points, whose addresses must survive
 * a move to another node); the others get NodePort Services: peers learn their addresses from
 * the DHT, not from a person, and a node port reaches them wherever a node is reachable.
 */
export function exposeTypeOf (s: AveragingSwarm, role: Role): ExposeType {
  const t = exposure(s)?.type ?? 'None'
  return t === 'LoadBalancer' && role !== 'bootstrap' ? 'NodePort' : t
}

export interface ExposedPod { pod: string, role: Role, bootstrapIndex?: number }

/** Every agent pod the spec wants (bootstrap, regular, auxiliary), by name; auxiliary agents reduce parts too, so outsiders must reach them. */
export function exposedPods (s: AveragingSwarm, counts: { bootstrap: (i: number) => number, agent: number, auxiliary: number }): ExposedPod[] {
  if (exposure(s) === undefined) return []
  const out: ExposedPod[] = []
  for (let i = 0; i < s.spec.bootstrap.replicas; i++) if (counts.bootstrap(i) > 0) out.push({ pod: names.bootstrapPod(s, i), role: 'bootstrap', bootstrapIndex: i })
  for (let n = 0; n < counts.agent; n++) out.push({ pod: `${names.agentSet(s)}-${n}`, role: 'agent' })
  if (s.spec.auxiliary.replicas > 0) for (let n = 0; n < counts.auxiliary; n++) out.push({ pod: `${names.auxiliarySet(s)}-${n}`, role: 'auxiliary' })
  return out
}

/**
 * The Service of one exposed agent (NodePort or LoadBalancer), named like its pod. Its ports are
 * the container's own, so a load balancer's ingress reaches the data channel at the port the agent
 * advertises to its group; node ports are left to the API server to allocate (no collisions
 * between swarms), and the operator reads them back. Not-ready addresses are published: an agent
 * turns Ready only after it reached peers, and outsiders may be those peers.
 */
export function buildAgentService (s: AveragingSwarm, p: ExposedPod) {
  const e = exposure(s)
  if (e === undefined) throw new Error('buildAgentService needs spec.network.expose')
  const type = exposeTypeOf(s, p.role)
  const svc = e.service
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: ownedMeta(s, p.pod, { [LABEL_EXPOSED_POD]: p.pod }, svc?.annotations),
    spec: {
      type,
      publishNotReadyAddresses: true,
      selector: { [LABEL_POD_NAME]: p.pod },
      externalTrafficPolicy: svc?.externalTrafficPolicy ?? 'Cluster',
      ...(type === 'LoadBalancer' && svc?.loadBalancerClass !== undefined ? { loadBalancerClass: svc.loadBalancerClass } : {}),
      ports: [
        { name: 'p2p', port: s.spec.network.port, targetPort: s.spec.network.port, protocol: 'TCP' },
        { name: 'data', port: e.dataPort, targetPort: e.dataPort, protocol: 'TCP' }
      ]
    }
  } satisfies V1Service
}

/**
 * pod name → its reachable multiaddrs (without /p2p), comma-separated, for the agent to announce,
 * then its data channel's, each as `data=<multiaddr>` (ANNOUNCE_DATA_PREFIX).
 * A ConfigMap mounted as a folder, not an environment variable: the addresses differ per pod of
 * one StatefulSet, and they become known only after the pod was scheduled (its node) or its load
 * balancer got an ingress, possibly minutes later. A mounted ConfigMap is updated in place by the
 * kubelet, and the agent rereads its file, so a late ingress neither restarts nor blocks a pod.
 * Its content is not in the pods' config hash: addresses changing must not roll the swarm.
 */
export function buildAnnounceConfigMap (s: AveragingSwarm, announce: ReadonlyMap<string, Reachable>) {
  const data = Object.fromEntries([...announce].filter(([, a]) => a.p2p.length > 0).sort(([a], [b]) => a.localeCompare(b))
    .map(([pod, a]) => [pod, [...a.p2p, ...a.data.map(d => `${ANNOUNCE_DATA_PREFIX}${d}`)].join(',')]))
  return { apiVersion: 'v1', kind: 'ConfigMap', metadata: ownedMeta(s, names.announceConfigMap(s)), data } satisfies V1ConfigMap
}
