/**
 * The operator's Prometheus metrics, named as controller-runtime names its own so existing
 * operator dashboards work, plus per-swarm gauges (no per-pod labels: bounded cardinality).
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client'
import type { AveragingSwarm, AveragingSwarmStatus, Phase } from '../api/v1alpha1/types.js'
import type { QueueObserver } from './queue/work-queue.js'

export const CONTROLLER = 'averagingswarm'
const PHASES: Phase[] = ['Pending', 'Progressing', 'Ready', 'Degraded', 'Suspended']

export class OperatorMetrics {
  readonly registry = new Registry()
  readonly reconcileTotal = new Counter({ name: 'controller_runtime_reconcile_total', help: 'Reconciles by result (success, error, requeue_after).', labelNames: ['controller', 'result'], registers: [this.registry] })
  readonly reconcileErrors = new Counter({ name: 'controller_runtime_reconcile_errors_total', help: 'Reconciles that failed.', labelNames: ['controller'], registers: [this.registry] })
  readonly reconcileTime = new Histogram({ name: 'controller_runtime_reconcile_time_seconds', help: 'Duration of one reconcile.', labelNames: ['controller'], buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10], registers: [this.registry] })
  readonly reconcileWrites = new Counter({ name: 'averagingswarm_operator_writes_total', help: 'Writes (apply, delete, status) sent by reconciles; flat at steady state.', registers: [this.registry] })
  readonly activeWorkers = new Gauge({ name: 'controller_runtime_active_workers', help: 'Workers reconciling now.', labelNames: ['controller'], registers: [this.registry] })
  readonly queueDepth = new Gauge({ name: 'workqueue_depth', help: 'Keys waiting in the work queue.', labelNames: ['name'], registers: [this.registry] })
  readonly queueAdds = new Counter({ name: 'workqueue_adds_total', help: 'Keys added to the work queue.', labelNames: ['name'], registers: [this.registry] })
  readonly queueRetries = new Counter({ name: 'workqueue_retries_total', help: 'Keys re-queued with back-off after a failure.', labelNames: ['name'], registers: [this.registry] })
  readonly queueWait = new Histogram({ name: 'workqueue_queue_duration_seconds', help: 'How long a key waited before a worker took it.', labelNames: ['name'], buckets: [0.0001, 0.001, 0.01, 0.1, 1, 10, 60], registers: [this.registry] })
  readonly leader = new Gauge({ name: 'leader_election_master_status', help: '1 while this process holds the lease.', labelNames: ['name'], registers: [this.registry] })
  readonly requests = new Counter({ name: 'rest_client_requests_total', help: 'Requests to the API server by method and status code.', labelNames: ['method', 'code'], registers: [this.registry] })
  readonly requestTime = new Histogram({ name: 'rest_client_request_duration_seconds', help: 'API server request latency.', labelNames: ['verb'], buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10], registers: [this.registry] })
  readonly swarms = new Gauge({ name: 'averagingswarm_swarms', help: 'AveragingSwarms this operator reconciles.', registers: [this.registry] })
  readonly desired = new Gauge({ name: 'averagingswarm_agents_desired', help: 'Agents a swarm wants (0 when suspended).', labelNames: ['namespace', 'swarm'], registers: [this.registry] })
  readonly ready = new Gauge({ name: 'averagingswarm_agents_ready', help: 'Agents of a swarm that are Ready.', labelNames: ['namespace', 'swarm'], registers: [this.registry] })
  readonly phase = new Gauge({ name: 'averagingswarm_phase', help: '1 for the phase a swarm is in, 0 for the others.', labelNames: ['namespace', 'swarm', 'phase'], registers: [this.registry] })
  readonly rounds = new Gauge({ name: 'averagingswarm_rounds_completed', help: 'Averaging rounds completed, as in status.roundsCompleted.', labelNames: ['namespace', 'swarm'], registers: [this.registry] })

  constructor () {
    collectDefaultMetrics({ register: this.registry })
    // Series exist from the start, so dashboards show 0 rather than "no data" before the first error.
    this.reconcileErrors.labels(CONTROLLER).inc(0)
    for (const result of ['success', 'error', 'requeue_after']) this.reconcileTotal.labels(CONTROLLER, result).inc(0)
  }

  queueObserver (name = CONTROLLER): QueueObserver {
    return {
      added: () => this.queueAdds.inc({ name }),
      retried: () => this.queueRetries.inc({ name }),
      depth: (n) => this.queueDepth.set({ name }, n),
      waited: (s) => this.queueWait.observe({ name }, s)
    }
  }

  /** Per-swarm gauges; status undefined removes the swarm's series (it was deleted). */
  swarmStatus (s: AveragingSwarm, status: AveragingSwarmStatus | undefined, total: number): void {
    const labels = { namespace: s.metadata.namespace ?? 'default', swarm: s.metadata.name }
    this.swarms.set(total)
    if (status === undefined) {
      this.desired.remove(labels); this.ready.remove(labels); this.rounds.remove(labels)
      for (const phase of PHASES) this.phase.remove({ ...labels, phase })
      return
    }
    this.desired.set(labels, s.spec.suspend ? 0 : s.spec.replicas)
    this.ready.set(labels, status.readyReplicas ?? 0)
    this.rounds.set(labels, status.roundsCompleted ?? 0)
    for (const phase of PHASES) this.phase.set({ ...labels, phase }, status.phase === phase ? 1 : 0)
  }
}
