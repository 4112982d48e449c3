/**
 * The Prometheus metrics the agent and the operator export, as a contract: name, type and the
 * label names each carries. agent/metrics/agent-metrics.ts and operator/metrics.ts build their
 * instruments from these entries (help text and buckets stay with the instruments); the Grafana
 * dashboard (dashboards/averaging-swarm.ts) and the operator's progress scraper name metrics only
 * through them, so a rename is one edit here and a type error or a failing test everywhere else.
 *
 * Histograms are named without a suffix; Prometheus exposes `_bucket` (with `le`), `_sum` and `_count`.
 */

export type MetricType = 'counter' | 'gauge' | 'histogram'

/**
 * One exported metric. `L`: the labels the code sets on it (prom-client's labelNames); `D`:
 * labels every series carries besides (the agent's registry default `swarm`).
 */
export interface MetricDef<T extends MetricType = MetricType, L extends string = string, D extends string = string> {
  readonly name: string
  readonly type: T
  readonly labels: readonly L[]
  /** Labels the registry adds to every series (setDefaultLabels). */
  readonly defaultLabels: readonly D[]
}

export type CounterDef<L extends string = string, D extends string = string> = MetricDef<'counter', L, D>
export type GaugeDef<L extends string = string, D extends string = string> = MetricDef<'gauge', L, D>
export type HistogramDef<L extends string = string, D extends string = string> = MetricDef<'histogram', L, D>

function family<D extends string> (defaultLabels: readonly D[]) {
  const def = <T extends MetricType> (type: T) =>
    <L extends string = never> (name: string, labels: readonly L[] = []): MetricDef<T, L, D> => ({ name, type, labels, defaultLabels })
  return { counter: def('counter'), gauge: def('gauge'), histogram: def('histogram') }
}

/** The label every agent series carries (the agent's registry default). */
export const AGENT_DEFAULT_LABELS = ['swarm'] as const
const agent = family(AGENT_DEFAULT_LABELS)
const operator = family([] as const)

/** The agent's metrics (agent/metrics/agent-metrics.ts). */
export const AGENT_METRICS = {
  rounds: agent.counter('averaging_rounds_total', ['outcome']),
  matchmakingSeconds: agent.histogram('averaging_matchmaking_duration_seconds'),
  allreduceSeconds: agent.histogram('averaging_allreduce_duration_seconds'),
  groupSize: agent.histogram('averaging_group_size'),
  bytesSent: agent.counter('averaging_sent_bytes_total'),
  bytesReceived: agent.counter('averaging_received_bytes_total'),
  partsKeptLocal: agent.counter('averaging_parts_kept_local_total'),
  /** Parts of the group's vector this agent reduced for its group (its span): none while it averages as a client. */
  partsReduced: agent.counter('averaging_parts_reduced_total'),
  /** Parts of failed reducers' spans the surviving members averaged among themselves after the round (agent/allreduce/repair.ts). */
  repairedParts: agent.counter('averaging_repaired_parts_total'),
  dataChannels: agent.counter('averaging_data_channels_total', ['path']),
  /** Rounds sent to a reducer over a direct channel kept from an earlier round instead of a new one (agent/allreduce/aggregate-protocol.ts keptAggregateProtocol). */
  dataChannelsReused: agent.counter('averaging_data_channels_reused_total'),
  bannedSenders: agent.counter('averaging_banned_senders_total'),
  /** Banned senders that were late, by the deadline that cut them off: adaptive (median + k·MAD) or fixed (sender or all-reduce timeout). */
  senderCutoffs: agent.counter('averaging_sender_cutoffs_total', ['deadline']),
  /** Reducers a sender gave up on for not returning their means, by deadline: adaptive (median + k·MAD) or fixed (reducer or all-reduce timeout). */
  reducerCutoffs: agent.counter('averaging_reducer_cutoffs_total', ['deadline']),
  /** Groups this agent led that assembled short of the declaration's expiration: a quorum in, the followers' arrival cutoff passed and nobody else looking under the key (agent/matchmaking/arrivals.ts). */
  earlyAssemblies: agent.counter('averaging_early_assemblies_total'),
  /** Seconds those groups did not wait for members that were not coming. */
  earlyAssemblySavedSeconds: agent.counter('averaging_early_assembly_saved_seconds_total'),
  /** The bandwidth this agent declared in its last round, bytes/s (0 before it declared any: the group then assumes its mean). */
  declaredBandwidth: agent.gauge('averaging_declared_bandwidth_bytes_per_second'),
  /** All-reduces run, by the codec the group used (compression: auto picks none or float16 per round). */
  codecRounds: agent.counter('averaging_codec_rounds_total', ['codec']),
  /** Of those, the rounds whose codec carried each member's change since the base its group shared, not its values (agent/allreduce/delta-base.ts). */
  deltaRounds: agent.counter('averaging_delta_rounds_total'),
  /** Outer steps' all-reduces that averaged the pseudo-gradients alone, their group holding one θ and m (agent/outer/outer-step.ts). */
  pseudoGradientRounds: agent.counter('averaging_pseudo_gradient_rounds_total'),
  peersConnected: agent.gauge('averaging_peers_connected'),
  routingTableSize: agent.gauge('averaging_dht_routing_table_size'),
  divergence: agent.gauge('averaging_parameter_divergence'),
  stateDownloads: agent.counter('averaging_state_downloads_total', ['outcome']),
  stateUploads: agent.counter('averaging_state_uploads_total'),
  trainingLoss: agent.gauge('averaging_training_loss'),
  heldOutLoss: agent.gauge('averaging_training_heldout_loss'),
  trainingSteps: agent.counter('averaging_training_steps_total'),
  lastRoundTimestamp: agent.gauge('averaging_last_round_timestamp_seconds'),
  /** What a sidecar trainer reports (POST /v1/report). */
  trainerLoss: agent.gauge('averaging_trainer_loss'),
  trainerSamples: agent.counter('averaging_trainer_samples_total'),
  paramsHash: agent.gauge('averaging_params_hash'),
  /** Checkpoints (agent/checkpoint/): outcome written | refused (another writer had the round) | failed. */
  checkpointWrites: agent.counter('averaging_checkpoint_writes_total', ['outcome']),
  checkpointSeconds: agent.histogram('averaging_checkpoint_write_duration_seconds'),
  checkpointBytes: agent.gauge('averaging_checkpoint_bytes'),
  /** The newest round this agent knows to be durably checkpointed (written, seen complete, or restored). */
  checkpointRound: agent.gauge('averaging_checkpoint_round'),
  checkpointTimestamp: agent.gauge('averaging_checkpoint_timestamp_seconds'),
  /** Newer checkpoints restore passed over (torn, corrupt, wrong schema), each logged with its reason. */
  checkpointSkipped: agent.counter('averaging_checkpoint_skipped_total'),
  /** 1 once this agent reached the swarm's completion and the final checkpoint is durable. */
  completed: agent.gauge('averaging_completed'),
  /** Open libp2p connections by how they reach the peer: direct, hole-punched (DCUtR) or relayed (circuit relay v2). */
  connections: agent.gauge('averaging_connections', ['kind']),
  connectionsOpened: agent.counter('averaging_connections_opened_total', ['kind']),
  /** 1 for how the swarm reaches this agent: public, relayed (behind NAT, through a relay slot) or unreachable (a client). */
  reachability: agent.gauge('averaging_reachability', ['kind']),
  /** Bytes this agent relayed for other members (AVS_RELAY=serve), both directions. */
  relayedBytes: agent.counter('averaging_relayed_bytes_total'),
  info: agent.gauge('averaging_agent_info', ['backend', 'mode', 'workload', 'version'])
} as const

/** The operator's metrics (operator/metrics.ts), named as controller-runtime names its own. */
export const OPERATOR_METRICS = {
  reconcileTotal: operator.counter('controller_runtime_reconcile_total', ['controller', 'result']),
  reconcileErrors: operator.counter('controller_runtime_reconcile_errors_total', ['controller']),
  reconcileTime: operator.histogram('controller_runtime_reconcile_time_seconds', ['controller']),
  reconcileWrites: operator.counter('averagingswarm_operator_writes_total'),
  activeWorkers: operator.gauge('controller_runtime_active_workers', ['controller']),
  queueDepth: operator.gauge('workqueue_depth', ['name']),
  queueAdds: operator.counter('workqueue_adds_total', ['name']),
  queueRetries: operator.counter('workqueue_retries_total', ['name']),
  queueWait: operator.histogram('workqueue_queue_duration_seconds', ['name']),
  leader: operator.gauge('leader_election_master_status', ['name']),
  requests: operator.counter('rest_client_requests_total', ['method', 'code']),
  requestTime: operator.histogram('rest_client_request_duration_seconds', ['verb']),
  swarms: operator.gauge('averagingswarm_swarms'),
  desired: operator.gauge('averagingswarm_agents_desired', ['namespace', 'swarm']),
  ready: operator.gauge('averagingswarm_agents_ready', ['namespace', 'swarm']),
  phase: operator.gauge('averagingswarm_phase', ['namespace', 'swarm', 'phase']),
  rounds: operator.gauge('averagingswarm_rounds_completed', ['namespace', 'swarm'])
} as const

/** The `controller` label of the controller-runtime metrics and the `name` of the work queue. */
export const CONTROLLER = 'averagingswarm'

/** Every metric the code defines, agent's and operator's. */
export const ALL_METRICS: readonly MetricDef[] = [...Object.values(AGENT_METRICS), ...Object.values(OPERATOR_METRICS)]
