/**
 * The operator process: caches, leader election, workers, progress sampling, metrics/health,
 * graceful shutdown. Exits 1 when it loses its Lease (a deposed leader must not keep writing).
 */
import { KubeConfig } from '@kubernetes/client-node'
import { pino } from 'pino'
import { parseOptions } from './options.js'
import { RestClient } from './kube/rest.js'
import { KubeClusterApi } from './kube/api.js'
import { Informers, swarmKeyOf, type CachedKind } from './kube/informers.js'
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

async function main (): Promise<void> {
  const opts = parseOptions(process.argv.slice(2))
  const log = pino({ level: opts.logLevel, base: { component: 'operator' }, timestamp: pino.stdTimeFunctions.isoTime })
  const kc = new KubeConfig()
  if (opts.kubeconfig !== undefined) kc.loadFromFile(opts.kubeconfig); else kc.loadFromDefault()
  const rest = new RestClient(kc)
  const metrics = new OperatorMetrics()
  rest.observer = (method, _path, code, seconds) => { metrics.requests.inc({ method, code: String(code) }); metrics.requestTime.observe({ verb: method }, seconds) }

  const queue = new WorkQueue(new ExponentialBackoff(50, 300_000), metrics.queueObserver())
  const podMonitors = await crdExists(rest, 'podmonitors.monitoring.coreos.com')
  const kinds: CachedKind[] = ['AveragingSwarm', 'StatefulSet', 'Service', 'ConfigMap', 'Secret', 'PodDisruptionBudget', 'Pod', ...(podMonitors ? ['PodMonitor' as const] : [])]
  const informers = new Informers(kc, rest, kinds, (kind, obj) => { const k = swarmKeyOf(kind, obj); if (k !== undefined) queue.add(k) }, log, opts.watchNamespace)
  const progress = new ProgressTracker(key => queue.add(key), undefined, { intervalMs: opts.progressIntervalSeconds * 1000, sampleSize: 32, timeoutMs: 2000 })
  const reconciler = new Reconciler({
    cache: informers,
    api: new KubeClusterApi(rest),
    config: { defaultImage: opts.agentImage, clusterDomain: opts.clusterDomain, agentDnsServers: opts.agentDnsServers, agentCommand: opts.agentCommand },
    progress,
    log,
    onStatus: (s, status) => metrics.swarmStatus(s, status, informers.list('AveragingSwarm').length)
  })

  metrics.leader.set({ name: opts.leaseName }, 0)
  let synced = false
  let stopping = false
  const abort = new AbortController()
  const elector = opts.leaderElect
    ? new LeaderElector(rest, { namespace: opts.leaseNamespace, name: opts.leaseName, identity: opts.identity, leaseDurationMs: opts.leaseDurationMs, renewDeadlineMs: opts.renewDeadlineMs, retryPeriodMs: opts.retryPeriodMs }, log)
    : undefined
  const [host, port] = splitHostPort(opts.metricsBindAddress)
  const server = await startHttpServer(host, port, metrics.registry, { healthy: () => !stopping, ready: () => synced })
  log.info({ metrics: opts.metricsBindAddress, podMonitors, watchNamespace: opts.watchNamespace ?? '(all)', leaderElect: opts.leaderElect }, 'operator starting')

  let workers: Promise<void> | undefined
  const shutdown = async (code: number, why: string): Promise<void> => {
    if (stopping) return
    stopping = true
    log.info({ why }, 'shutting down')
    abort.abort()
    queue.shutDown()
    progress.stop()
    const grace = new Promise(resolve => setTimeout(resolve, SHUTDOWN_GRACE_MS).unref())
    const t0 = Date.now()
    await Promise.race([workers ?? Promise.resolve(), grace]) // in-flight reconciles finish
    log.info({ ms: Date.now() - t0 }, 'workers stopped')
    await informers.stop()
    if (code === 0) await elector?.release()
    log.info({ ms: Date.now() - t0 }, 'stopped')
    metrics.leader.set({ name: opts.leaseName }, 0)
    server.close()
    rest.close()
    log.flush()
    process.exit(code)
  }
  process.on('SIGTERM', () => { void shutdown(0, 'SIGTERM') })
  process.on('SIGINT', () => { void shutdown(0, 'SIGINT') })

  // Standby replicas warm their caches too, so a takeover starts reconciling at once.
  await informers.start(abort.signal)
  synced = true
  if (elector !== undefined) {
    if (!await elector.acquire(abort.signal)) return
    metrics.leader.set({ name: opts.leaseName }, 1)
    void elector.holdUntil(abort.signal, () => { void shutdown(1, 'lost the leader lease') })
  }
  for (const s of informers.list('AveragingSwarm')) queue.add(`${s.metadata.namespace}/${s.metadata.name}`)
  const resync = setInterval(() => { for (const s of informers.list('AveragingSwarm')) queue.add(`${s.metadata.namespace}/${s.metadata.name}`) }, opts.resyncSeconds * 1000)
  resync.unref()
  progress.start()
  workers = runWorkers(queue, opts.workers, async (key) => {
    const end = metrics.reconcileTime.startTimer({ controller: CONTROLLER })
    metrics.activeWorkers.inc({ controller: CONTROLLER })
    try {
      const r = await reconciler.reconcile(key)
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
  await workers
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
