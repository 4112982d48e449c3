/**
 * spec.network.expose: how agents are reached from outside the cluster. Kept in its
 * own file next to the network section so that a later spec.network.relay has room beside it.
 * Absent (or type None) keeps today's pods exactly: an operator upgrade rolls no agent.
 */
import { obj, int, str, stringMap, type CelRule, type Schema } from './schema-builders.js'
import type { SpecRule } from '../checkpoint-parameters.js'
import { DEFAULTS } from './defaults.js'
import { HOSTNAME, IPV6 } from './address-patterns.js'

export const EXPOSE_TYPES = ['None', 'HostPort', 'NodePort', 'LoadBalancer'] as const
export const EXTERNAL_TRAFFIC_POLICIES = ['Cluster', 'Local'] as const
/** A DNS name (which includes dotted IPv4 addresses) or an IPv6 address, as it goes into /dns4/, /ip4/ or /ip6/. */
export const ANNOUNCE_HOST_PATTERN = `^(${HOSTNAME}|${IPV6})$`

export const expose: Schema = obj('How the agents are reached from outside the cluster. The operator derives each agent\'s reachable multiaddrs from the API (Node addresses, node ports, load-balancer ingress), hands them to the agent and publishes the bootstrap agents\' in status.bootstrapPeers.', {
  type: str('None: pod addresses only (the default). HostPort: the libp2p and data ports on the node\'s address (ExternalIP, else InternalIP), at most one agent of the swarm per node. NodePort: a NodePort Service per agent, reached at a node\'s address. LoadBalancer: a LoadBalancer Service per bootstrap agent, NodePort Services for the other agents.', { enum: EXPOSE_TYPES, default: 'None' }),
  dataPort: int('Fixed TCP port of the direct data channel (AVS_DATA_PORT) of exposed agents; must differ from network.port, metrics.port and workload.sidecarPort.', { minimum: 1, maximum: 65535, default: DEFAULTS.dataPort }),
  announceHost: str('Host announced instead of the derived one (a DNS name or an IP address), e.g. a NAT gateway\'s public name; ports stay the exposed ones.', { maxLength: 253, pattern: ANNOUNCE_HOST_PATTERN }),
  service: obj('Settings of the per-agent Services (NodePort and LoadBalancer).', {
    annotations: stringMap('Annotations of the Services, e.g. cloud load-balancer settings (service.beta.kubernetes.io/aws-load-balancer-type: nlb).'),
    loadBalancerClass: str('spec.loadBalancerClass of the LoadBalancer Services (immutable once set on a Service).', { maxLength: 253 }),
    externalTrafficPolicy: str('spec.externalTrafficPolicy of the Services: Cluster (any node forwards) or Local (only the agent\'s node answers, the client\'s address is kept).', { enum: EXTERNAL_TRAFFIC_POLICIES, default: 'Cluster' })
  })
})

/** The rule between exposed ports: CEL for the API server, `holds` for the local validator (on a spec the server has not defaulted). */
export const EXPOSE_RULES: readonly SpecRule[] = [{
  field: 'network.expose.dataPort',
  message: 'network.expose.dataPort must differ from network.port, metrics.port and workload.sidecarPort',
  cel: '!has(self.network.expose) || (self.network.expose.dataPort != self.network.port && self.network.expose.dataPort != self.metrics.port && self.network.expose.dataPort != self.workload.sidecarPort)',
  holds: s => {
    const n = s.network as { port?: number, expose?: { dataPort?: number } } | undefined
    if (n?.expose === undefined || n.expose === null) return true
    const data = n.expose.dataPort ?? DEFAULTS.dataPort
    const others = [n.port ?? DEFAULTS.p2pPort, (s.metrics as { port?: number } | undefined)?.port ?? DEFAULTS.metricsPort, (s.workload as { sidecarPort?: number } | undefined)?.sidecarPort ?? DEFAULTS.sidecarPort]
    return !others.includes(data)
  }
}]

export const exposeRules = (): CelRule[] => EXPOSE_RULES.map(r => ({ rule: r.cel, message: r.message, fieldPath: `.${r.field}` }))
