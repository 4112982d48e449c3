import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import type { AllReduceResult } from '../allreduce/runner.js'

/**
 * The agent's Prometheus metrics (base units, `_total`, `_seconds`, `_bytes`). Labels carry the
 * swarm, never peer ids. Histogram buckets fit what was measured on loopback and LANs:
 * matchmaking from ~50 ms to the averaging expiration, all-reduce from ~10 ms to a minute.
 */
export class AgentMetrics {
  readonly registry = new Registry()
  readonly rounds: Counter<'outcome'>
  readonly matchmakingSeconds: Histogram
  readonly allreduceSeconds: Histogram
  readonly groupSize: Histogram
  readonly bytesSent: Counter
  readonly bytesReceived: Counter
  readonly partsKeptLocal: Counter
  readonly dataChannels: Counter<'path'>
  readonly bannedSenders: Counter
  readonly peersConnected: Gauge
  readonly routingTableSize: Gauge
  readonly divergence: Gauge
  readonly stateDownloads: Counter<'outcome'>
  readonly stateUploads: Counter
  readonly trainingLoss: Gauge
  readonly trainingSteps: Counter
  readonly heldOutLoss: Gauge
  readonly lastRoundTimestamp: Gauge
  readonly trainerLoss: Gauge
  readonly trainerSamples: Counter
  readonly paramsHash: Gauge
  readonly info: Gauge<'backend' | 'mode' | 'workload' | 'version'>

  constructor (swarm: string) {
    const registers = [this.registry]
    this.registry.setDefaultLabels({ swarm })
    collectDefaultMetrics({ register: this.registry })
    this.rounds = new Counter({ name: 'averaging_rounds_total', help: 'Averaging rounds by outcome (success, partial, failure).', labelNames: ['outcome'], registers })
    for (const outcome of ['success', 'partial', 'failure']) this.rounds.labels(outcome).inc(0)
    this.matchmakingSeconds = new Histogram({ name: 'averaging_matchmaking_duration_seconds', help: 'Time from step to an assembled group.', buckets: [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40], registers })
    this.allreduceSeconds = new Histogram({ name: 'averaging_allreduce_duration_seconds', help: 'Butterfly all-reduce duration once the group formed.', buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60], registers })
    this.groupSize = new Histogram({ name: 'averaging_group_size', help: 'Members of each group this agent averaged in.', buckets: [2, 3, 4, 6, 8, 12, 16, 32, 64], registers })
    this.bytesSent = new Counter({ name: 'averaging_sent_bytes_total', help: 'Tensor bytes sent in all-reduce rounds.', registers })
    this.bytesReceived = new Counter({ name: 'averaging_received_bytes_total', help: 'Tensor bytes received in all-reduce rounds.', registers })
    this.partsKeptLocal = new Counter({ name: 'averaging_parts_kept_local_total', help: 'Parts left unaveraged because a peer failed mid-round.', registers })
    this.dataChannels = new Counter({ name: 'averaging_data_channels_total', help: 'Channels opened to reducers, by path: direct (TLS sockets) or libp2p (streams, the fallback).', labelNames: ['path'], registers })
    for (const path of ['direct', 'libp2p']) this.dataChannels.labels(path).inc(0)
    this.bannedSenders = new Counter({ name: 'averaging_banned_senders_total', help: 'Group members left out of a span this agent reduced (failed, too slow, or sent invalid parts: NaN, wrong length).', registers })
    this.peersConnected = new Gauge({ name: 'averaging_peers_connected', help: 'libp2p peers with an open connection.', registers })
    this.routingTableSize = new Gauge({ name: 'averaging_dht_routing_table_size', help: 'Peers in the Kademlia routing table.', registers })
    this.divergence = new Gauge({ name: 'averaging_parameter_divergence', help: 'L2 distance between the local tensors before and after the last round, relative to their norm.', registers })
    this.stateDownloads = new Counter({ name: 'averaging_state_downloads_total', help: 'State downloads from peers by outcome.', labelNames: ['outcome'], registers })
    this.stateUploads = new Counter({ name: 'averaging_state_uploads_total', help: 'State downloads served to newcomers.', registers })
    this.trainingLoss = new Gauge({ name: 'averaging_training_loss', help: 'Training loss of the builtin workload (last step).', registers })
    this.heldOutLoss = new Gauge({ name: 'averaging_training_heldout_loss', help: 'Loss of the builtin workload on balanced held-out data, after the last round.', registers })
    this.trainingSteps = new Counter({ name: 'averaging_training_steps_total', help: 'Optimizer steps of the builtin workload.', registers })
    this.lastRoundTimestamp = new Gauge({ name: 'averaging_last_round_timestamp_seconds', help: 'Unix time of the last successful round.', registers })
    // What a sidecar trainer reports (POST /v1/report); the builtin workload has its own training metrics above.
    this.trainerLoss = new Gauge({ name: 'averaging_trainer_loss', help: 'Last loss the sidecar trainer reported.', registers })
    this.trainerSamples = new Counter({ name: 'averaging_trainer_samples_total', help: 'Samples the sidecar trainer reported training on.', registers })
    this.paramsHash = new Gauge({ name: 'averaging_params_hash', help: 'Low 48 bits of the hash of the trainer\'s parameters: peers holding the same parameters show the same value.', registers })
    this.info = new Gauge({ name: 'averaging_agent_info', help: 'Constant 1, labelled with the tensor backend, peer mode, workload and version.', labelNames: ['backend', 'mode', 'workload', 'version'], registers })
  }

  recordRound (outcome: 'success' | 'partial' | 'failure', detail: { matchmakingMs?: number, result?: AllReduceResult }): void {
    this.rounds.labels(outcome).inc()
    if (detail.matchmakingMs !== undefined) this.matchmakingSeconds.observe(detail.matchmakingMs / 1000)
    const r = detail.result
    if (r != null) {
      this.allreduceSeconds.observe(r.durationMs / 1000)
      this.groupSize.observe(r.groupSize)
      this.bytesSent.inc(r.bytesSent)
      this.bytesReceived.inc(r.bytesReceived)
      this.partsKeptLocal.inc(r.partsKeptLocal)
      this.bannedSenders.inc(r.bannedSenders.length)
      for (const [path, n] of Object.entries(r.channels)) this.dataChannels.labels(path).inc(n)
      this.lastRoundTimestamp.set(Date.now() / 1000)
    }
  }
}
