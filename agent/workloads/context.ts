import type { Logger } from 'pino'
import type { SwarmNode } from '../net/node.js'
import type { AveragerConfig, AveragerHooks, DecentralizedAverager, NamedTensor } from '../averager.js'
import type { AgentMetrics } from '../metrics/agent-metrics.js'
import type { Checkpointer } from '../checkpoint/checkpointer.js'

/** What a workload gets from the agent process: everything it needs, passed in explicitly. */
export interface WorkloadContext {
  /** The libp2p node, with its rendezvous (node.services.rendezvous, shared by the averager and state sharing). */
  readonly node: SwarmNode
  readonly averagerConfig: AveragerConfig
  /** Seconds between averaging rounds. */
  readonly period: number
  readonly metrics: AgentMetrics
  readonly log: Logger
  /** Aborted on SIGTERM: finish or leave the current round, then return. */
  readonly signal: AbortSignal
  /** Creates the averager over these tensors, with the agent's metric hooks attached. */
  createAverager (tensors: readonly NamedTensor[], hooks?: AveragerHooks): Promise<DecentralizedAverager>
  /** Writes and restores checkpoints when the swarm has them (AVS_CHECKPOINT_DIR or AVS_CHECKPOINT_S3_*). */
  readonly checkpointer?: Checkpointer
  /** Rounds after which the run is complete (AVS_COMPLETION_ROUNDS); undefined: never. */
  readonly completionRounds?: number
  /** Unix milliseconds after which the run ends at the end of the round under way (AVS_COMPLETION_DEADLINE). */
  readonly completionDeadline?: number
  /** The run ends once the sidecar's trainer says it has finished (AVS_COMPLETION_ON_TRAINER_EXIT). */
  readonly completionOnTrainerExit?: boolean
  /** Marks the agent ready (joined the DHT and, for a newcomer, state loaded). */
  setReady (ready: boolean): void
}

export interface Workload {
  /** Runs until the context's signal aborts; resolves once the last round finished or was left. */
  run (): Promise<void>
}
