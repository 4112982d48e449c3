/**
 * The agent's environment contract: the one place that names every variable the agent reads.
 * The operator's pod builder, the local runtime and the test kubelet fill these; the agent's
 * config loader validates them. Durations are Go-style strings ("15s", "500ms", "1m30s").
 */
export interface EnvVarSpec {
  readonly name: string
  readonly description: string
  /** Default used when the variable is unset; undefined means required or "off". */
  readonly default?: string
  readonly required?: boolean
}

export const AGENT_ENV = {
  swarm: { name: 'AVS_SWARM', description: 'Name of the AveragingSwarm this agent belongs to (metric label).', required: true },
  namespace: { name: 'AVS_NAMESPACE', description: 'Kubernetes namespace of the swarm.', default: 'default' },
  podName: { name: 'AVS_POD_NAME', description: 'Name of this agent (pod name); used in logs.', required: true },
  podIP: { name: 'AVS_POD_IP', description: 'IP address the agent listens on and announces.', default: '0.0.0.0' },
  identityKey: { name: 'AVS_IDENTITY_KEY', description: 'Base64 protobuf-encoded Ed25519 libp2p private key; a fresh key is generated when unset.' },
  mode: { name: 'AVS_MODE', description: 'node (sends and reduces), client (sends only, no inbound) or auxiliary (reduces only, weight 0).', default: 'node' },
  p2pPort: { name: 'AVS_P2P_PORT', description: 'TCP port for libp2p.', default: '31337' },
  announceAddrs: { name: 'AVS_ANNOUNCE_ADDRS', description: 'Comma-separated multiaddrs to announce instead of the listen address.' },
  bootstrapPeers: { name: 'AVS_BOOTSTRAP_PEERS', description: 'Comma-separated multiaddrs (with /p2p/<peer id>) dialled first; /dns4 names allowed.' },
  dnsServers: { name: 'AVS_DNS_SERVERS', description: 'Comma-separated host:port DNS servers used to resolve /dns4 multiaddrs instead of the system resolver.' },
  pskFile: { name: 'AVS_PSK_FILE', description: 'Path to a libp2p private-network key (swarm.key format); outsiders without it cannot connect.' },
  allowPeers: { name: 'AVS_ALLOW_PEERS', description: 'Comma-separated libp2p peer ids allowed to connect (libp2p and the data channel); unset allows every peer (holding the private-network key, if one is set).' },
  dataChannel: { name: 'AVS_DATA_CHANNEL', description: 'How tensor parts travel: direct (TLS sockets authenticated by libp2p peer ids, falling back to libp2p streams where a peer cannot be reached) or libp2p (always libp2p streams).', default: 'direct' },
  dataPort: { name: 'AVS_DATA_PORT', description: 'TCP port of the direct data channel; 0 picks a free port, which is advertised to each group.', default: '0' },
  dataThreads: { name: 'AVS_DATA_THREADS', description: 'Worker threads that carry the direct data channel (TLS, framing) so one agent uses more than one core; 0 keeps it on the main thread, best where the agents already fill the cores.', default: '0' },
  kernels: { name: 'AVS_KERNELS', description: 'Kernels that check and sum tensor parts: wasm-simd (WebAssembly SIMD, the default where the runtime has it) or js (the same results with more CPU).' },
  metricsPort: { name: 'AVS_METRICS_PORT', description: 'HTTP port serving /metrics, /healthz and /readyz.', default: '9400' },
  prefix: { name: 'AVS_PREFIX', description: 'DHT key prefix shared by the swarm (hivemind prefix).', required: true },
  targetGroupSize: { name: 'AVS_TARGET_GROUP_SIZE', description: 'Groups assemble at once when they reach this size.', default: '4' },
  minGroupSize: { name: 'AVS_MIN_GROUP_SIZE', description: 'A leader whose time is up starts only with at least this many members.', default: '2' },
  initialGroupBits: { name: 'AVS_INITIAL_GROUP_BITS', description: 'Initial Moshpit group bits (a string of 0 and 1).', default: '' },
  averagingExpiration: { name: 'AVS_AVERAGING_EXPIRATION', description: 'How long a peer looks for a group before re-declaring (duration).', default: '15s' },
  requestTimeout: { name: 'AVS_REQUEST_TIMEOUT', description: 'How long a follower waits for a leader reply (duration); must be below averagingExpiration.', default: '3s' },
  allreduceTimeout: { name: 'AVS_ALLREDUCE_TIMEOUT', description: 'Upper bound of one all-reduce after the group formed (duration).', default: '60s' },
  partSizeBytes: { name: 'AVS_PART_SIZE_BYTES', description: 'Tensor bytes per streamed part, after compression.', default: '65536' },
  averagingAlpha: { name: 'AVS_AVERAGING_ALPHA', description: 'local += alpha * (mean - local); 1 adopts the mean.', default: '1' },
  compression: { name: 'AVS_COMPRESSION', description: 'none | float16 | uniform8bit | blockwise8bit.', default: 'none' },
  bandwidth: { name: 'AVS_BANDWIDTH', description: 'Declared bandwidth (any consistent unit) that sizes this peer\'s span; unset = group mean.' },
  period: { name: 'AVS_PERIOD', description: 'How often the agent starts an averaging round (duration).', default: '30s' },
  workload: { name: 'AVS_WORKLOAD', description: 'builtin (tfjs training on a synthetic shard) or sidecar (a trainer drives the agent through its local API).', default: 'builtin' },
  sidecarPort: { name: 'AVS_SIDECAR_PORT', description: 'Loopback TCP port of the sidecar API (workload=sidecar).', default: '9401' },
  shmDir: { name: 'AVS_SHM_DIR', description: 'Memory-backed folder shared with the trainer container, holding its tensor regions (workload=sidecar, docs/trainer-api.md); unset, trainers hand tensors over in HTTP bodies.' },
  shardIndex: { name: 'AVS_SHARD_INDEX', description: 'Data shard of the builtin workload; defaults to the pod ordinal parsed from AVS_POD_NAME.' },
  logLevel: { name: 'AVS_LOG_LEVEL', description: 'trace | debug | info | warn | error.', default: 'info' }
} as const satisfies Record<string, EnvVarSpec>

export type AgentEnvKey = keyof typeof AGENT_ENV
