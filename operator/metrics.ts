/**
 * The operator's Prometheus metrics, named as controller-runtime names its own so existing
 * operator dashboards work, plus per-swarm gauges (no per-pod labels: bounded cardinality).
 * Names and labels come from api/metric-names.ts (the contract the dashboard reads).
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client'
import type { AveragingSwarm, AveragingSwarmStatus } from '../api/v1alpha1/types.js'
import { PHASES } from '../api/v1alpha1/schema.js'
import { roleReplicas } from './builders/statefulset.js'
import type { QueueObserver } from './queue/work-queue.js'
import { CONTROLLER, OPERATOR_METRICS as M } from '../api/metric-names.js'

export { CONTROLLER }

export class OperatorMetrics {
  readonly registry = new Registry()
  readonly reconcileTotal = new Counter({ name: M.reconcileTotal.name, help: 'Reconciles by result (success, error, requeue_after).', labelNames: M.reconcileTotal.labels, registers: [this.registry] })
  readonly reconcileErrors = new Counter({ name: M.reconcileErrors.name, help: 'Reconciles that failed.', labelNames: M.reconcileErrors.labels, registers: [this.registry] })
  readonly reconcileTime = new Histogram({ name: M.reconcileTime.name, help: 'Duration of one reconcile.', labelNames: M.reconcileTime.labels, buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10], registers: [this.registry] })
  readonly reconcileWrites = new Counter({ name: M.reconcileWrites.name, help: 'Writes (apply, delete, status) sent by reconciles; flat at steady state.', registers: [this.registry] })
  readonly activeWorkers = new Gauge({ name: M.activeWorkers.name, help: 'Workers reconciling now.', labelNames: M.activeWorkers.labels, registers: [this.registry] })
  readonly queueDepth = new Gauge({ name: M.queueDepth.name, help: 'Keys waiting in the work queue.', labelNames: M.queueDepth.labels, registers: [this.registry] })
  readonly queueAdds = new Counter({ name: M.queueAdds.name, help: 'Keys added to the work queue.', labelNames: M.queueAdds.labels, registers: [this.registry] })
  readonly queueRetries = new Counter({ name: M.queueRetries.name, help: 'Keys re-queued with back-off after a failure.', labelNames: M.queueRetries.labels, registers: [this.registry] })
  readonly queueWait = new Histogram({ name: M.queueWait.name, help: 'How long a key waited before a worker took it.', labelNames: M.queueWait.labels, buckets: [0.0001, 0.001, 0.01, 0.1, 1, 10, 60], registers: [this.registry] })
  readonly leader = new Gauge({ name: M.leader.name, help: '1 while this process holds the lease.', labelNames: M.leader.labels, registers: [this.registry] })
  readonly requests = new Counter({ name: M.requests.name, help: 'Requests to the API server by method and status code.', labelNames: M.requests.labels, registers: [this.registry] })
  readonly requestTime = new Histogram({ name: M.requestTime.name, help: 'API server request latency.', labelNames: M.requestTime.labels, buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10], registers: [this.registry] })
  readonly swarms = new Gauge({ name: M.swarms.name, help: 'AveragingSwarms this operator reconciles.', registers: [this.registry] })
  readonly desired = new Gauge({ name: M.desired.name, help: 'Agents a swarm wants (0 when suspended, or Complete with completion.podPolicy Delete).', labelNames: M.desired.labels, registers: [this.registry] })
  readonly ready = new Gauge({ name: M.ready.name, help: 'Agents of a swarm that are Ready.', labelNames: M.ready.labels, registers: [this.registry] })
  readonly phase = new Gauge({ name: M.phase.name, help: '1 for the phase a swarm is in, 0 for the others.', labelNames: M.phase.labels, registers: [this.registry] })
  readonly rounds = new Gauge({ name: M.rounds.name, help: 'Averaging rounds completed, as in status.roundsCompleted.', labelNames: M.rounds.labels, registers: [this.registry] })

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
    const r = roleReplicas({ ...s, status })
    this.desired.set(labels, r.agent + Array.from({ length: s.spec.bootstrap.replicas }, (_, i) => r.bootstrap(i)).reduce((a, b) => a + b, 0))
    this.ready.set(labels, status.readyReplicas ?? 0)
    this.rounds.set(labels, status.roundsCompleted ?? 0)
    for (const phase of PHASES) this.phase.set({ ...labels, phase }, status.phase === phase ? 1 : 0)
  }
}
