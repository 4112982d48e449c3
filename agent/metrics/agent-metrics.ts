import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import type { StepDetail } from '../averager.js'
import { COMPRESSION_NAMES } from '../compression/index.js'
import { AGENT_DEFAULT_LABELS, AGENT_METRICS as M } from '../../api/metric-names.js'

/**
 * The agent's Prometheus metrics (base units, `_total`, `_seconds`, `_bytes`), named and labelled
 * as api/metric-names.ts declares them (the contract the dashboard reads). Labels carry the
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
  readonly partsReduced: Counter
  readonly repairedParts: Counter
  readonly dataChannels: Counter<'path'>
  readonly dataChannelsReused: Counter
  readonly bannedSenders: Counter
  readonly senderCutoffs: Counter<'deadline'>
  readonly reducerCutoffs: Counter<'deadline'>
  readonly earlyAssemblies: Counter
  readonly earlyAssemblySavedSeconds: Counter
  readonly declaredBandwidth: Gauge
  readonly codecRounds: Counter<'codec'>
  readonly deltaRounds: Counter
  readonly pseudoGradientRounds: Counter
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
  readonly checkpointWrites: Counter<'outcome'>
  readonly checkpointSeconds: Histogram
  readonly checkpointBytes: Gauge
  readonly checkpointRound: Gauge
  readonly checkpointTimestamp: Gauge
  readonly checkpointSkipped: Counter
  readonly completed: Gauge
  readonly connections: Gauge<'kind'>
  readonly connectionsOpened: Counter<'kind'>
  readonly reachability: Gauge<'kind'>
  readonly relayedBytes: Counter

  constructor (swarm: string) {
    const registers = [this.registry]
    const defaultLabels: Record<typeof AGENT_DEFAULT_LABELS[number], string> = { swarm }
    this.registry.setDefaultLabels(defaultLabels)
    collectDefaultMetrics({ register: this.registry })
    this.rounds = new Counter({ name: M.rounds.name, help: 'Averaging rounds by outcome (success, partial, failure).', labelNames: M.rounds.labels, registers })
    for (const outcome of ['success', 'partial', 'failure']) this.rounds.labels(outcome).inc(0)
    this.matchmakingSeconds = new Histogram({ name: M.matchmakingSeconds.name, help: 'Time from step to an assembled group.', buckets: [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40], registers })
    this.allreduceSeconds = new Histogram({ name: M.allreduceSeconds.name, help: 'Butterfly all-reduce duration once the group formed.', buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60], registers })
    this.groupSize = new Histogram({ name: M.groupSize.name, help: 'Members of each group this agent averaged in.', buckets: [2, 3, 4, 6, 8, 12, 16, 32, 64], registers })
    this.bytesSent = new Counter({ name: M.bytesSent.name, help: 'Tensor bytes sent in all-reduce rounds.', registers })
    this.bytesReceived = new Counter({ name: M.bytesReceived.name, help: 'Tensor bytes received in all-reduce rounds.', registers })
    this.partsKeptLocal = new Counter({ name: M.partsKeptLocal.name, help: 'Parts left unaveraged because a peer failed mid-round.', registers })
    this.partsReduced = new Counter({ name: M.partsReduced.name, help: 'Parts of the group\'s vector this agent reduced for its group (its span); none while it averages as a client.', registers })
    this.repairedParts = new Counter({ name: M.repairedParts.name, help: 'Parts of failed reducers\' spans the surviving members averaged among themselves after the round (span repair).', registers })
    this.dataChannels = new Counter({ name: M.dataChannels.name, help: 'Channels opened to reducers, by path: direct (TLS sockets) or libp2p (streams, the fallback).', labelNames: M.dataChannels.labels, registers })
    for (const path of ['direct', 'libp2p']) this.dataChannels.labels(path).inc(0)
    this.dataChannelsReused = new Counter({ name: M.dataChannelsReused.name, help: 'Rounds sent to a reducer over a direct channel kept from an earlier round instead of a new one.', registers })
    this.bannedSenders = new Counter({ name: M.bannedSenders.name, help: 'Group members left out of a span this agent reduced (failed, too slow, or sent invalid parts: NaN, wrong length).', registers })
    this.senderCutoffs = new Counter({ name: M.senderCutoffs.name, help: 'Senders left out of a span for being late, by deadline: adaptive (median + k·MAD of the others\' waits, once a majority delivered) or fixed (sender or all-reduce timeout).', labelNames: M.senderCutoffs.labels, registers })
    for (const deadline of ['adaptive', 'fixed']) this.senderCutoffs.labels(deadline).inc(0)
    this.reducerCutoffs = new Counter({ name: M.reducerCutoffs.name, help: 'Reducers a sender gave up on for not returning the means of their span, by deadline: adaptive (median + k·MAD of the other reducers\' waits, once a majority answered) or fixed (reducer or all-reduce timeout).', labelNames: M.reducerCutoffs.labels, registers })
    for (const deadline of ['adaptive', 'fixed']) this.reducerCutoffs.labels(deadline).inc(0)
    this.earlyAssemblies = new Counter({ name: M.earlyAssemblies.name, help: 'Groups this agent led that assembled before their declaration expired: a quorum had joined, the followers\' arrival cutoff (median + k·MAD of past arrivals) had passed, and nobody else was looking under the key.', registers })
    this.earlyAssemblySavedSeconds = new Counter({ name: M.earlyAssemblySavedSeconds.name, help: 'Seconds of declaration the early-assembled groups did not wait out.', registers })
    this.declaredBandwidth = new Gauge({ name: M.declaredBandwidth.name, help: 'Bandwidth this agent declared to its last group, bytes/s: the spec\'s, else its measured link rate; 0 before it declared any (the group assumes its mean).', registers })
    this.codecRounds = new Counter({ name: M.codecRounds.name, help: 'All-reduces run, by the codec the group used (compression auto picks none or float16 per round).', labelNames: M.codecRounds.labels, registers })
    for (const codec of COMPRESSION_NAMES) this.codecRounds.labels(codec).inc(0)
    this.deltaRounds = new Counter({ name: M.deltaRounds.name, help: 'All-reduces whose codec carried each member\'s change since the base its group shared (a round all of them landed whole), not its values.', registers })
    this.pseudoGradientRounds = new Counter({ name: M.pseudoGradientRounds.name, help: 'Outer steps\' all-reduces that averaged the pseudo-gradients alone: every member of the group held the same outer parameters and momentum.', registers })
    this.connections = new Gauge({ name: M.connections.name, help: 'Open libp2p connections by how they reach the peer: direct, hole-punched (DCUtR) or relayed (circuit relay v2).', labelNames: M.connections.labels, registers })
    this.connectionsOpened = new Counter({ name: M.connectionsOpened.name, help: 'libp2p connections opened, by kind: direct, hole-punched or relayed.', labelNames: M.connectionsOpened.labels, registers })
    this.reachability = new Gauge({ name: M.reachability.name, help: '1 for how the swarm reaches this agent: public, relayed (behind NAT, through a relay slot) or unreachable (averages as a client).', labelNames: M.reachability.labels, registers })
    this.relayedBytes = new Counter({ name: M.relayedBytes.name, help: 'Bytes this agent relayed between other members (AVS_RELAY=serve), both directions together.', registers })
    for (const kind of ['direct', 'hole-punched', 'relayed']) { this.connections.labels(kind).set(0); this.connectionsOpened.labels(kind).inc(0) }
    for (const kind of ['public', 'relayed', 'unreachable']) this.reachability.labels(kind).set(0)
    this.peersConnected = new Gauge({ name: M.peersConnected.name, help: 'libp2p peers with an open connection.', registers })
    this.routingTableSize = new Gauge({ name: M.routingTableSize.name, help: 'Peers in the Kademlia routing table.', registers })
    this.divergence = new Gauge({ name: M.divergence.name, help: 'L2 distance between the local tensors before and after the last round, relative to their norm.', registers })
    this.stateDownloads = new Counter({ name: M.stateDownloads.name, help: 'State downloads from peers by outcome.', labelNames: M.stateDownloads.labels, registers })
    this.stateUploads = new Counter({ name: M.stateUploads.name, help: 'State downloads served to newcomers.', registers })
    this.trainingLoss = new Gauge({ name: M.trainingLoss.name, help: 'Training loss of the builtin workload (last step).', registers })
    this.heldOutLoss = new Gauge({ name: M.heldOutLoss.name, help: 'Loss of the builtin workload on balanced held-out data, after the last round.', registers })
    this.trainingSteps = new Counter({ name: M.trainingSteps.name, help: 'Optimizer steps of the builtin workload.', registers })
    this.lastRoundTimestamp = new Gauge({ name: M.lastRoundTimestamp.name, help: 'Unix time of the last successful round.', registers })
    // What a sidecar trainer reports (POST /v1/report); the builtin workload has its own training metrics above.
    this.trainerLoss = new Gauge({ name: M.trainerLoss.name, help: 'Last loss the sidecar trainer reported.', registers })
    this.trainerSamples = new Counter({ name: M.trainerSamples.name, help: 'Samples the sidecar trainer reported training on.', registers })
    this.paramsHash = new Gauge({ name: M.paramsHash.name, help: 'Low 48 bits of the hash of the trainer\'s parameters: peers holding the same parameters show the same value.', registers })
    this.checkpointWrites = new Counter({ name: M.checkpointWrites.name, help: 'Checkpoint writes by outcome: written, refused (another writer had the round) or failed.', labelNames: M.checkpointWrites.labels, registers })
    this.checkpointSeconds = new Histogram({ name: M.checkpointSeconds.name, help: 'Seconds a checkpoint write took (snapshot excluded), fsyncs included.', buckets: [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300], registers })
    this.checkpointBytes = new Gauge({ name: M.checkpointBytes.name, help: 'Bytes of the last checkpoint this agent wrote.', registers })
    this.checkpointRound = new Gauge({ name: M.checkpointRound.name, help: 'Newest round this agent knows to be durably checkpointed (written, seen complete or restored).', registers })
    this.checkpointTimestamp = new Gauge({ name: M.checkpointTimestamp.name, help: 'Unix seconds of that checkpoint.', registers })
    this.checkpointSkipped = new Counter({ name: M.checkpointSkipped.name, help: 'Newer checkpoints a restore passed over (torn, corrupt or another schema).', registers })
    this.completed = new Gauge({ name: M.completed.name, help: '1 once this agent reached the swarm\'s completion and the final checkpoint is durable.', registers })
    this.info = new Gauge({ name: M.info.name, help: 'Constant 1, labelled with the tensor backend (trainer for sidecar agents: their trainer owns the model), peer mode, workload and version.', labelNames: M.info.labels, registers })
  }

  recordRound (outcome: 'success' | 'partial' | 'failure', detail: StepDetail): void {
    this.rounds.labels(outcome).inc()
    if (detail.matchmakingMs !== undefined) this.matchmakingSeconds.observe(detail.matchmakingMs / 1000)
    // Set once a group formed: the round declared a bandwidth (or none) and the group chose a codec.
    if (detail.codec !== undefined) {
      this.codecRounds.labels(detail.codec).inc()
      if (detail.delta === true) this.deltaRounds.inc()
      if (detail.outer === 'pseudo-gradients') this.pseudoGradientRounds.inc()
      this.declaredBandwidth.set(detail.declaredBandwidth ?? 0)
    }
    const r = detail.result
    if (r != null) {
      this.allreduceSeconds.observe(r.durationMs / 1000)
      this.groupSize.observe(r.groupSize)
      this.bytesSent.inc(r.bytesSent)
      this.bytesReceived.inc(r.bytesReceived)
      this.partsKeptLocal.inc(r.partsKeptLocal)
      this.partsReduced.inc(r.partsReduced)
      this.repairedParts.inc(r.repairedParts)
      this.bannedSenders.inc(r.bannedSenders.length)
      for (const [deadline, peers] of Object.entries(r.cutOffSenders)) this.senderCutoffs.labels(deadline).inc(peers.length)
      for (const [deadline, peers] of Object.entries(r.cutOffReducers)) this.reducerCutoffs.labels(deadline).inc(peers.length)
      for (const [path, n] of Object.entries(r.channels)) this.dataChannels.labels(path).inc(n)
      this.dataChannelsReused.inc(r.reusedChannels)
      this.lastRoundTimestamp.set(Date.now() / 1000)
    }
  }
}
