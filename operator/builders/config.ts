/** What the builders need from the operator's own configuration (flags and environment). */
export interface BuilderConfig {
  /** Agent image used when spec.image is unset. */
  defaultImage: string
  /** Cluster DNS domain used in the bootstrap agents' /dns4 multiaddrs. */
  clusterDomain: string
  /** Optional command that starts the agent, for images without an entrypoint (test kubelet). */
  agentCommand?: string[]
  /** Optional AVS_DNS_SERVERS for the agents (host:port list), when the pod's resolver is not cluster DNS. */
  agentDnsServers?: string
}

export const DEFAULT_BUILDER_CONFIG: BuilderConfig = {
  defaultImage: 'ghcr.io/averaging-swarm/agent:0.1.0',
  clusterDomain: 'cluster.local'
}
