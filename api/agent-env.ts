/**
 * The agent's environment contract: the one place that names every variable the agent reads.
 * The operator's pod builder, the local runtime and the test kubelet fill these; the agent's
 * config loader validates them. Durations are Go-style strings ("15s", "500ms", "1m30s").
 */
import { AVERAGING_KEYS, AVERAGING_PARAMETERS, type AveragingKey, type AveragingParameter } from './averaging-parameters.js'

export interface EnvVarSpec {
  readonly name: string
  readonly description: string
  /** Default used when the variable is unset; undefined means required or "off". */
  readonly default?: string
  readonly required?: boolean
}

/** Environment entries of the averaging parameters; AVS_PREFIX is required (the operator always sets it). */
const AVERAGING_ENV = Object.fromEntries(AVERAGING_KEYS.map(k => {
  const p: AveragingParameter = AVERAGING_PARAMETERS[k]
  return [k, { name: p.env, description: p.description, ...(p.default === undefined ? {} : { default: String(p.default) }), ...(k === 'prefix' ? { required: true } : {}) }]
})) as Record<AveragingKey, EnvVarSpec>

/**
 * How an AVS_ANNOUNCE_FILE entry names where the agent's data port is reached at another port (a
 * node port), instead of a libp2p address: `data=/ip4/<host>/tcp/<port>`. The operator writes it.
 */
export const ANNOUNCE_DATA_PREFIX = 'data='

export const AGENT_ENV = {
  swarm: { name: 'AVS_SWARM', description: 'Name of the AveragingSwarm this agent belongs to (metric label).', required: true },
  namespace: { name: 'AVS_NAMESPACE', description: 'Kubernetes namespace of the swarm.', default: 'default' },
  podName: { name: 'AVS_POD_NAME', description: 'Name of this agent (pod name); used in logs.', required: true },
  podIP: { name: 'AVS_POD_IP', description: 'IP address the agent listens on and announces.', default: '0.0.0.0' },
  identityKey: { name: 'AVS_IDENTITY_KEY', description: 'Base64 protobuf-encoded Ed25519 libp2p private key; a fresh key is generated when unset.' },
  mode: { name: 'AVS_MODE', description: 'node (sends and reduces), client (sends only, no inbound) or auxiliary (reduces only, weight 0).', default: 'node' },
  p2pPort: { name: 'AVS_P2P_PORT', description: 'TCP port for libp2p.', default: '31337' },
  announceAddrs: { name: 'AVS_ANNOUNCE_ADDRS', description: 'Comma-separated multiaddrs to announce instead of the listen address.' },
  membersDir: { name: 'AVS_MEMBERS_DIR', description: 'A folder holding the swarm\'s member count (`members`) and bootstrap count (`bootstrap`), reread before each round: an agent whose initial group bits are empty places itself on the Moshpit grid by its rank from its pod name. The operator mounts it (the <swarm>-members ConfigMap, rewritten when the swarm is scaled); missing files leave every agent under one key.' },
  announceFile: { name: 'AVS_ANNOUNCE_FILE', description: 'A file of comma-separated multiaddrs (without /p2p) announced before the other addresses, reread every few seconds; a missing file announces nothing extra. An entry data=/ip4/<host>/tcp/<port> says where the direct data channel is reached at another port than AVS_DATA_PORT (a node port). The operator mounts it for swarms with spec.network.expose (a node\'s or a load balancer\'s address, known only after the pod started).' },
  bootstrapPeers: { name: 'AVS_BOOTSTRAP_PEERS', description: 'Comma-separated multiaddrs (with /p2p/<peer id>) dialled first; /dns4 names allowed.' },
  dnsServers: { name: 'AVS_DNS_SERVERS', description: 'Comma-separated host:port DNS servers used to resolve /dns4 multiaddrs instead of the system resolver.' },
  pskFile: { name: 'AVS_PSK_FILE', description: 'Path to a libp2p private-network key (swarm.key format); outsiders without it cannot connect.' },
  allowPeers: { name: 'AVS_ALLOW_PEERS', description: 'Comma-separated libp2p peer ids allowed to connect (libp2p and the data channel); unset allows every peer (holding the private-network key, if one is set).' },
  relay: { name: 'AVS_RELAY', description: 'serve: this agent runs a circuit relay v2 hop service for the swarm\'s members (peers holding the private-network key and, when AVS_ALLOW_PEERS is set, on the allow list), so members behind NAT can be reached through it; off: it relays nothing. It never relays for outsiders.', default: 'off' },
  relayMaxReservations: { name: 'AVS_RELAY_MAX_RESERVATIONS', description: 'Relay slots (reservations) a serving relay holds at once (1 to 4096); members asking beyond it are refused and, if they stay unreachable, average as clients.', default: '128' },
  relayCircuitMiB: { name: 'AVS_RELAY_CIRCUIT_MIB', description: 'MiB one relayed connection may carry, both directions together (1 to 1048576); the relay then closes it and the peers dial again. Bounded so one runaway pair cannot hold the relay\'s link forever; large by default because tensor parts are.', default: '65536' },
  relayCircuitDuration: { name: 'AVS_RELAY_CIRCUIT_DURATION', description: 'Longest life of one relayed connection (1s to 24h); the relay then closes it and the peers dial again.', default: '1h' },
  reachability: { name: 'AVS_REACHABILITY', description: 'auto: after joining, the agent compares the address a bootstrap peer observed it at with its own (identify); a different one means it is behind NAT. public: it is reachable at its listen or announce addresses. private: it is not. An unreachable agent reserves a relay slot on a member relay and announces its /p2p-circuit address; without one it averages as a client.', default: 'auto' },
  dataChannel: { name: 'AVS_DATA_CHANNEL', description: 'How tensor parts travel: direct (TLS sockets authenticated by libp2p peer ids, falling back to libp2p streams where a peer cannot be reached) or libp2p (always libp2p streams).', default: 'direct' },
  dataPort: { name: 'AVS_DATA_PORT', description: 'TCP port of the direct data channel; 0 picks a free port, which is advertised to each group.', default: '0' },
  kernels: { name: 'AVS_KERNELS', description: 'Kernels that check and sum tensor parts: wasm-simd (WebAssembly SIMD, the default where the runtime has it) or js (the same results with more CPU).' },
  metricsPort: { name: 'AVS_METRICS_PORT', description: 'HTTP port serving /metrics, /healthz and /readyz.', default: '9400' },
  // The averaging parameters, from their table (api/averaging-parameters.ts).
  ...AVERAGING_ENV,
  workload: { name: 'AVS_WORKLOAD', description: 'builtin (tfjs training on a synthetic shard) or sidecar (a trainer drives the agent through its local API).', default: 'builtin' },
  sidecarPort: { name: 'AVS_SIDECAR_PORT', description: 'Loopback TCP port of the sidecar API (workload=sidecar).', default: '9401' },
  shmDir: { name: 'AVS_SHM_DIR', description: 'Memory-backed folder shared with the trainer container, holding its tensor regions (workload=sidecar, docs/trainer-api.md); unset, trainers hand tensors over in HTTP bodies.' },
  checkpointDir: { name: 'AVS_CHECKPOINT_DIR', description: 'Folder the swarm\'s checkpoints live in, shared by its agents (spec.checkpoint.volume, mounted at /var/lib/avs/checkpoints; a folder of this machine in the local runtime): safetensors files and manifests under <folder>/<swarm>/. An agent that finds no live peer to download state from restores the newest complete checkpoint. Unset, nothing is written or restored.' },
  checkpointEvery: { name: 'AVS_CHECKPOINT_EVERY', description: 'Averaging rounds between checkpoints (1 to 1000000000); in each group that completes such a round, its member with the smallest peer id writes.', default: '100' },
  checkpointInterval: { name: 'AVS_CHECKPOINT_INTERVAL', description: 'Time between checkpoints (Go duration, 10s to 8760h; spec.checkpoint.interval): a group\'s writer also writes a round once this long has passed since the newest checkpoint, whether or not AVS_CHECKPOINT_EVERY rounds have. Unset, rounds alone decide.' },
  checkpointKeep: { name: 'AVS_CHECKPOINT_KEEP', description: 'Newest complete checkpoints kept (1 to 1000); older ones are deleted once a newer one is complete.', default: '3' },
  checkpointS3Bucket: { name: 'AVS_CHECKPOINT_S3_BUCKET', description: 'Bucket of an S3-compatible object store that holds the swarm\'s checkpoints instead of a folder (spec.checkpoint.s3): objects <prefix>/<swarm>/round-<n>.json (the manifest) and round-<n>-<tag>.safetensors. Credentials come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (the operator fills them from spec.checkpoint.s3.secretRef). Unset, checkpoints use AVS_CHECKPOINT_DIR (if set).' },
  checkpointS3Endpoint: { name: 'AVS_CHECKPOINT_S3_ENDPOINT', description: 'http(s)://host[:port] of the S3-compatible server; unset, AWS S3 of AVS_CHECKPOINT_S3_REGION.' },
  checkpointS3Region: { name: 'AVS_CHECKPOINT_S3_REGION', description: 'Region of the bucket (signing region of a self-hosted server).', default: 'us-east-1' },
  checkpointS3Prefix: { name: 'AVS_CHECKPOINT_S3_PREFIX', description: 'Key prefix the swarms\' checkpoint folders live under (no leading or trailing slash); unset, the bucket\'s root.' },
  checkpointS3PathStyle: { name: 'AVS_CHECKPOINT_S3_PATH_STYLE', description: 'true: <endpoint>/<bucket>/<key> addressing (most self-hosted servers); false: <bucket>.<endpoint>/<key>.', default: 'false' },
  restoreFromSwarm: { name: 'AVS_RESTORE_FROM_SWARM', description: 'Another swarm whose checkpoint a fresh swarm starts from (spec.restoreFrom.swarm), read from the same store as this swarm\'s checkpoints: used when no live peer offers its state and this swarm has no checkpoint of its own yet.' },
  restoreFromRound: { name: 'AVS_RESTORE_FROM_ROUND', description: 'The round of AVS_RESTORE_FROM_SWARM\'s checkpoint to start from (spec.restoreFrom.round); unset, its newest complete one.' },
  completionOnTrainerExit: { name: 'AVS_COMPLETION_ON_TRAINER_EXIT', description: 'true (workload=sidecar): the agent\'s run ends once its trainer says it has finished (POST /v1/finish; the local runtime also sends it when the trainer exits 0): a final checkpoint of its last round, then averaging_completed 1.', default: 'false' },
  completionDeadline: { name: 'AVS_COMPLETION_DEADLINE', description: 'The run ends at the first round that ends after this time (RFC 3339; the operator sets the swarm\'s creation time plus spec.completion.duration): as with AVS_COMPLETION_ROUNDS, a final checkpoint, then averaging_completed 1. Unset, time does not end the run.' },
  completionRounds: { name: 'AVS_COMPLETION_ROUNDS', description: 'The run ends after this many averaging rounds (1 to 1000000000000): the agents write a final checkpoint (when checkpoints are on), report averaging_completed 1 and stop averaging. Unset, the swarm averages until it is deleted.' },
  terminationGrace: { name: 'AVS_TERMINATION_GRACE_SECONDS', description: 'Seconds between SIGTERM and the kill that follows it (the pod\'s terminationGracePeriodSeconds; the operator sets it from spec.podTemplate.terminationGracePeriodSeconds, 0 to 3600). On SIGTERM the agent finishes the round under way; a round still running shortly before the kill hands the rest of the agent\'s span to its group, which averages it among the members left, and the agent leaves.', default: '30' },
  shardIndex: { name: 'AVS_SHARD_INDEX', description: 'Data shard of the builtin workload; defaults to the pod ordinal parsed from AVS_POD_NAME.' },
  logLevel: { name: 'AVS_LOG_LEVEL', description: 'trace | debug | info | warn | error.', default: 'info' }
} as const satisfies Record<string, EnvVarSpec>

export type AgentEnvKey = keyof typeof AGENT_ENV
