/**
 * The test kubelet: registers fake GPU Nodes, keeps their Ready condition and Leases fresh, and
 * runs every pod the real scheduler binds to them as local processes (see PodWorker). One
 * instance serves all of its nodes from one pod watch (fieldSelector spec.nodeName!=).
 */
import { appendFileSync, mkdirSync } from 'node:fs'
import { join } from 'node:path'
import {
  CoreV1Api, CoordinationV1Api, ListWatch, Watch, PatchStrategy, setHeaderOptions,
  type KubeConfig, type V1Pod, type KubernetesListObject
} from '@kubernetes/client-node'
import { microTime, rfc3339 } from '../time.js'
import { nodeObject, nodeConditions, leaseObject, LEASE_NAMESPACE, type NodeShape } from './node-object.js'
import { PodWorker } from './pod-worker.js'
import { apiPodSources } from './pod-sources.js'
import { DEFAULT_IMAGES, type ImageTable } from './images.js'
import type { Backoff } from './container.js'
import type { ApiServerAccess } from './volumes.js'
import type { AddressBlock } from './address-block.js'
import { startLogServer, type LogServer } from './log-server.js'
import { ServiceProxy } from './service-proxy.js'

export interface KubeletOptions {
  readonly kc: KubeConfig
  readonly nodes: readonly NodeShape[]
  readonly api: ApiServerAccess
  readonly addresses: AddressBlock
  /** Pod directories (volumes) and container logs live under here. */
  readonly workDir: string
  /** Extra env for every container, e.g. AVS_DNS_SERVERS. */
  readonly injectedEnv?: Readonly<Record<string, string>>
  /** Extra image mappings, tried before the defaults. */
  readonly images?: ImageTable
  readonly restartBackoff?: Backoff
  readonly heartbeatMs?: number
  /** Certificate and key for the per-node kubelet API (kubectl logs); omitted → no log server. */
  readonly servingTls?: { readonly cert: string, readonly key: string }
}

const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch)

export class TestKubelet {
  private readonly core: CoreV1Api
  private readonly coordination: CoordinationV1Api
  private readonly nodeNames: Set<string>
  private readonly workers = new Map<string, PodWorker>()
  /** Log dirs of pods, kept after the pod is gone so tests can read them. */
  private readonly logDirs = new Map<string, string>()
  private informer: ListWatch<V1Pod> | undefined
  private heartbeat: NodeJS.Timeout | undefined
  private stopped = false
  private readonly logServers: LogServer[] = []
  /** Node ports and load balancers (no kube-proxy or cloud controller here): service-proxy.ts. */
  private serviceProxy: ServiceProxy | undefined

  constructor (private readonly options: KubeletOptions) {
    this.core = options.kc.makeApiClient(CoreV1Api)
    this.coordination = options.kc.makeApiClient(CoordinationV1Api)
    this.nodeNames = new Set(options.nodes.map((n) => n.name))
    mkdirSync(join(options.workDir, 'pods'), { recursive: true })
    mkdirSync(join(options.workDir, 'logs'), { recursive: true })
  }

  async start (): Promise<void> {
    await Promise.all(this.options.nodes.map(async (shape) => await this.register(shape)))
    this.heartbeat = setInterval(() => { void this.beat() }, this.options.heartbeatMs ?? 10_000)
    const fieldSelector = 'spec.nodeName!='
    const list = async (): Promise<KubernetesListObject<V1Pod>> => await this.core.listPodForAllNamespaces({ fieldSelector })
    const informer = new ListWatch<V1Pod>('/api/v1/pods', new Watch(this.options.kc), list, false, undefined, fieldSelector)
    informer.on('add', (pod) => this.sync(pod))
    informer.on('update', (pod) => this.sync(pod))
    informer.on('delete', (pod) => this.gone(pod))
    // ListWatch stops on errors other than 410/timeouts: start again until the kubelet stops.
    informer.on('error', (error) => {
      if (this.stopped) return
      this.log(`pod watch failed, restarting: ${(error as Error | undefined)?.message ?? 'unknown error'}`)
      if (!this.stopped) setTimeout(() => { if (!this.stopped) void informer.start() }, 1000)
    })
    this.informer = informer
    await informer.start()
    this.serviceProxy = new ServiceProxy({ kc: this.options.kc, nodes: this.options.nodes, nextAddress: () => this.options.addresses.nextPodAddress(), log: this.log })
    await this.serviceProxy.start()
  }

  private async register (nodeShape: NodeShape): Promise<void> {
    let shape = nodeShape
    if (this.options.servingTls !== undefined) {
      const server = await startLogServer(shape.address, this.options.servingTls, (ns, pod, container) => this.containerLogFile(ns, pod, container))
      this.logServers.push(server)
      shape = { ...shape, kubeletPort: server.port }
    }
    const now = rfc3339()
    const node = nodeObject(shape, now)
    let uid: string
    try {
      uid = (await this.core.createNode({ body: node })).metadata?.uid ?? ''
    } catch (error) {
      if ((error as { code?: number }).code !== 409) throw error
      uid = (await this.core.readNode({ name: shape.name })).metadata?.uid ?? ''
    }
    await this.core.patchNodeStatus({ name: shape.name, body: { status: node.status } }, mergePatch)
    const lease = leaseObject(shape.name, uid, microTime())
    try {
      await this.coordination.createNamespacedLease({ namespace: LEASE_NAMESPACE, body: lease })
    } catch (error) {
      if ((error as { code?: number }).code !== 409) throw error
    }
  }

  /** Renews every node's Lease and Ready condition (node-lifecycle controller watches both). */
  private async beat (ready = true): Promise<void> {
    const now = rfc3339()
    await Promise.all([...this.nodeNames].map(async (name) => {
      try {
        await this.coordination.patchNamespacedLease({ name, namespace: LEASE_NAMESPACE, body: { spec: { renewTime: microTime(), holderIdentity: name } } }, mergePatch)
        await this.core.patchNodeStatus({ name, body: { status: { conditions: nodeConditions(now, ready) } } }, mergePatch)
      } catch (error) {
        this.log(`heartbeat of node ${name} failed: ${(error as Error).message}`)
      }
    }))
  }

  /** The kubelet's own log: <workDir>/kubelet.log. */
  readonly log = (line: string): void => {
    try { appendFileSync(join(this.options.workDir, 'kubelet.log'), `${new Date().toISOString()} ${line}\n`) } catch {}
  }

  private key (pod: V1Pod): string { return `${pod.metadata?.namespace ?? ''}/${pod.metadata?.name ?? ''}` }

  private sync (pod: V1Pod): void {
    if (this.stopped || !this.nodeNames.has(pod.spec?.nodeName ?? '')) return
    const key = this.key(pod)
    const existing = this.workers.get(key)
    if (existing !== undefined && existing.uid !== pod.metadata?.uid) {
      // Same name, new pod (StatefulSet recreation): the old one is gone.
      void existing.kill()
    } else if (existing !== undefined) {
      existing.update(pod)
      return
    }
    const phase = pod.status?.phase
    if (phase === 'Succeeded' || phase === 'Failed') {
      if (pod.metadata?.deletionTimestamp !== undefined && pod.metadata?.deletionTimestamp !== null) void this.finalDelete(pod)
      return
    }
    if (pod.metadata?.deletionTimestamp !== undefined && pod.metadata.deletionTimestamp !== null && pod.status?.podIP === undefined) {
      // Deleted before it ever started here: nothing to stop.
      void this.finalDelete(pod)
      return
    }
    const shape = this.options.nodes.find((n) => n.name === pod.spec?.nodeName)
    const worker = new PodWorker(pod, {
      kc: this.options.kc,
      sources: apiPodSources(this.options.kc),
      api: this.options.api,
      images: [...(this.options.images ?? []), ...DEFAULT_IMAGES],
      backoff: this.options.restartBackoff ?? { initialMs: 1000, maxMs: 30_000 },
      injectedEnv: this.options.injectedEnv ?? {},
      hostIP: shape?.address ?? '127.0.0.1',
      podIP: this.options.addresses.nextPodAddress(),
      workDir: join(this.options.workDir, 'pods'),
      logRoot: join(this.options.workDir, 'logs'),
      log: this.log,
      onGone: () => { if (this.workers.get(key) === worker) this.workers.delete(key) }
    })
    this.workers.set(key, worker)
    this.logDirs.set(key, worker.logDir)
    this.logDirs.set(`${key}/${pod.metadata?.uid ?? ''}`, worker.logDir)
    worker.update(pod)
    worker.start().catch((error: Error) => { this.log(`pod ${key} failed in the test kubelet: ${error.message}`) })
  }

  private async finalDelete (pod: V1Pod): Promise<void> {
    try {
      await this.core.deleteNamespacedPod({ name: pod.metadata?.name ?? '', namespace: pod.metadata?.namespace ?? '', gracePeriodSeconds: 0, body: { gracePeriodSeconds: 0, preconditions: { uid: pod.metadata?.uid } } })
    } catch (error) {
      // 404/409: already deleted (and maybe recreated under the same name).
      if (![404, 409].includes((error as { code?: number }).code ?? 0)) this.log(`final delete of ${this.key(pod)} failed: ${(error as Error).message}`)
    }
  }

  private gone (pod: V1Pod): void {
    const worker = this.workers.get(this.key(pod))
    if (worker !== undefined && worker.uid === pod.metadata?.uid) void worker.kill()
  }

  /** The log file of a container of a pod this kubelet ran (the latest pod of that name unless uid is given). */
  containerLogFile (namespace: string, pod: string, container: string, uid?: string): string | undefined {
    const dir = this.logDirs.get(uid === undefined ? `${namespace}/${pod}` : `${namespace}/${pod}/${uid}`)
    return dir === undefined ? undefined : join(dir, `${container}.log`)
  }

  /** Kills every pod process at once (no API calls) and stops heartbeats; Nodes stay registered. */
  async stop (): Promise<void> {
    this.stopped = true
    clearInterval(this.heartbeat)
    await this.informer?.stop()
    await this.serviceProxy?.stop()
    await Promise.all(this.logServers.map(async (server) => await server.stop()))
    await Promise.all([...this.workers.values()].map(async (w) => await w.kill()))
    this.workers.clear()
  }
}
