/**
 * The operator process: caches, leader election, workers, progress sampling, metrics/health,
 * graceful shutdown. Exits 1 when it loses its Lease (a deposed leader must not keep writing).
 */
import { KubeConfig } from '@kubernetes/client-node'
import { pino, type Logger as Log } from 'pino'
import { parseOptions, type OperatorOptions } from './options.js'
import { RestClient } from './kube/rest.js'
import { KubeClusterApi } from './kube/api.js'
import { Informers, swarmKeysOf, type CachedKind } from './kube/informers.js'
import { OperatorMetrics, CONTROLLER } from './metrics.js'
import { WorkQueue, runWorkers } from './queue/work-queue.js'
import { ExponentialBackoff } from './queue/backoff.js'
import { Reconciler } from './controller/reconciler.js'
import { ProgressTracker } from './controller/progress.js'
import { LeaderElector } from './leader.js'
import { startHttpServer } from './http-server.js'
import { ApiError } from './kube/rest.js'
import { resourcePath } from './kube/resources.js'

const SHUTDOWN_GRACE_MS = 10_000

type Options = OperatorOptions

/** The controller's parts: caches feeding the work queue, the reconciler and the progress sampler. */
interface Controller {
  readonly rest: RestClient
  readonly metrics: OperatorMetrics
  readonly queue: WorkQueue
  readonly informers: Informers
  readonly progress: ProgressTracker
  readonly reconciler: Reconciler
  readonly podMonitors: boolean
}

async function buildController (opts: Options, log: Log): Promise<Controller> {
  const kc = new KubeConfig()
  if (opts.kubeconfig !== undefined) kc.loadFromFile(opts.kubeconfig); else kc.loadFromDefault()
  const rest = new RestClient(kc)
  const metrics = new OperatorMetrics()
  rest.observer = (method, _path, code, seconds) => { metrics.requests.inc({ method, code: String(code) }); metrics.requestTime.observe({ verb: method }, seconds) }
  const queue = new WorkQueue(new ExponentialBackoff(50, 300_000), metrics.queueObserver())
  const podMonitors = await crdExists(rest, 'podmonitors.monitoring.coreos.com')
  const kinds: CachedKind[] = ['AveragingSwarm', 'StatefulSet', 'Service', 'ConfigMap', 'Secret', 'PodDisruptionBudget', 'Pod', 'PersistentVolumeClaim', 'Node', ...(podMonitors ? ['PodMonitor' as const] : [])]
  const informers: Informers = new Informers(kc, rest, kinds, (kind, obj) => { for (const k of swarmKeysOf(kind, obj, () => informers.list('AveragingSwarm'))) queue.add(k) }, log, opts.watchNamespace)
  const progress = new ProgressTracker(key => queue.add(key), undefined, { intervalMs: opts.progressIntervalSeconds * 1000, sampleSize: 32, timeoutMs: 2000 })
  const reconciler = new Reconciler({
    cache: informers,
    api: new KubeClusterApi(rest),
    config: { defaultImage: opts.agentImage, clusterDomain: opts.clusterDomain, agentDnsServers: opts.agentDnsServers, agentCommand: opts.agentCommand },
    progress,
    log,
    onStatus: (s, status) => metrics.swarmStatus(s, status, informers.list('AveragingSwarm').length)
  })
  return { rest, metrics, queue, informers, progress, reconciler, podMonitors }
}

function leaderElector (opts: Options, rest: RestClient, log: Log): LeaderElector | undefined {
  return opts.leaderElect
    ? new LeaderElector(rest, { namespace: opts.leaseNamespace, name: opts.leaseName, identity: opts.identity, leaseDurationMs: opts.leaseDurationMs, renewDeadlineMs: opts.renewDeadlineMs, retryPeriodMs: opts.retryPeriodMs }, log)
    : undefined
}

/** The operator's lifecycle: health as the probes see it, and one graceful shutdown however it is asked for. */
class Lifecycle {
  synced = false
  stopping = false
  workers: Promise<void> | undefined
  readonly abort = new AbortController()
  server: { close: () => void } | undefined

  constructor (private readonly c: Controller, private readonly opts: Options, private readonly log: Log, private readonly elector: LeaderElector | undefined) {}

  async shutdown (code: number, why: string): Promise<void> {
    if (this.stopping) return
    this.stopping = true
    const { log, c } = this
    log.info({ why }, 'shutting down')
    this.abort.abort()
    c.queue.shutDown()
    c.progress.stop()
    const grace = new Promise(resolve => setTimeout(resolve, SHUTDOWN_GRACE_MS).unref())
    const t0 = Date.now()
    await Promise.race([this.workers ?? Promise.resolve(), grace]) // in-flight reconciles finish
    log.info({ ms: Date.now() - t0 }, 'workers stopped')
    await c.informers.stop()
    if (code === 0) await this.elector?.release()
    log.info({ ms: Date.now() - t0 }, 'stopped')
    c.metrics.leader.set({ name: this.opts.leaseName }, 0)
    this.server?.close()
    c.rest.close()
    log.flush()
    process.exit(code)
  }
}

/** Every swarm into the queue now and each resync period after. */
function enqueueSwarms (c: Controller, resyncSeconds: number): void {
  const all = (): void => { for (const s of c.informers.list('AveragingSwarm')) c.queue.add(`${s.metadata.namespace}/${s.metadata.name}`) }
  all()
  setInterval(all, resyncSeconds * 1000).unref()
}

/** Reconciles from the queue with opts.workers workers, counting each outcome; resolves when the queue shuts down. */
async function reconcileLoop (c: Controller, workers: number, log: Log): Promise<void> {
  const { metrics, queue } = c
  await runWorkers(queue, workers, async (key) => {
    const end = metrics.reconcileTime.startTimer({ controller: CONTROLLER })
    metrics.activeWorkers.inc({ controller: CONTROLLER })
    try {
      const r = await c.reconciler.reconcile(key)
      metrics.reconcileWrites.inc(r.writes)
      metrics.reconcileTotal.inc({ controller: CONTROLLER, result: r.requeueAfterMs === undefined ? 'success' : 'requeue_after' })
      if (r.writes > 0) log.info({ swarm: key, writes: r.writes, phase: r.status?.phase }, 'reconciled')
      return r.requeueAfterMs
    } finally {
      metrics.activeWorkers.dec({ controller: CONTROLLER })
      end()
    }
  }, (key, err) => {
    metrics.reconcileErrors.inc({ controller: CONTROLLER })
    metrics.reconcileTotal.inc({ controller: CONTROLLER, result: 'error' })
    log.warn({ swarm: key, err: err instanceof Error ? err.message : String(err), retries: queue.backoff.retries(key) }, 'reconcile failed; retrying with back-off')
  })
}

async function main (): Promise<void> {
  const opts = parseOptions(process.argv.slice(2))
  const log = pino({ level: opts.logLevel, base: { component: 'operator' }, timestamp: pino.stdTimeFunctions.isoTime })
  const c = await buildController(opts, log)
  c.metrics.leader.set({ name: opts.leaseName }, 0)
  const elector = leaderElector(opts, c.rest, log)
  const life = new Lifecycle(c, opts, log, elector)
  const [host, port] = splitHostPort(opts.metricsBindAddress)
  life.server = await startHttpServer(host, port, c.metrics.registry, { healthy: () => !life.stopping, ready: () => life.synced })
  log.info({ metrics: opts.metricsBindAddress, podMonitors: c.podMonitors, watchNamespace: opts.watchNamespace ?? '(all)', leaderElect: opts.leaderElect }, 'operator starting')
  process.on('SIGTERM', () => { void life.shutdown(0, 'SIGTERM') })
  process.on('SIGINT', () => { void life.shutdown(0, 'SIGINT') })

  // Standby replicas warm their caches too, so a takeover starts reconciling at once.
  await c.informers.start(life.abort.signal)
  life.synced = true
  if (elector !== undefined) {
    if (!await elector.acquire(life.abort.signal)) return
    c.metrics.leader.set({ name: opts.leaseName }, 1)
    void elector.holdUntil(life.abort.signal, () => { void life.shutdown(1, 'lost the leader lease') })
  }
  enqueueSwarms(c, opts.resyncSeconds)
  c.progress.start()
  life.workers = reconcileLoop(c, opts.workers, log)
  await life.workers
}

async function crdExists (rest: RestClient, name: string): Promise<boolean> {
  try {
    await rest.request('GET', resourcePath('CustomResourceDefinition', undefined, name))
    return true
  } catch (e) {
    if (e instanceof ApiError && (e.code === 404 || e.code === 403)) return false
    throw e
  }
}

function splitHostPort (addr: string): [string, number] {
  const i = addr.lastIndexOf(':')
  const host = i <= 0 ? '0.0.0.0' : addr.slice(0, i)
  return [host, Number(addr.slice(i + 1))]
}

main().catch((e: unknown) => {
  console.error(JSON.stringify({ level: 'fatal', msg: e instanceof Error ? e.message : String(e) }))
  process.exit(1)
})
