/**
 * Everything the kubelet does for one pod bound to one of its nodes: a loopback address, a pod
 * directory with its volumes, init containers in order, then all containers at once, status
 * through pods/status, and graceful deletion (SIGTERM, grace period, SIGKILL, final delete with
 * gracePeriodSeconds 0).
 */
import { mkdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { CoreV1Api, PatchStrategy, setHeaderOptions, type KubeConfig, type V1Pod } from '@kubernetes/client-node'
import { rfc3339 } from '../time.js'
import { ContainerRunner, type Backoff } from './container.js'
import { ContainerConfigError } from './env.js'
import type { ImageTable } from './images.js'
import type { PodSources } from './pod-sources.js'
import { materialiseVolumes, refreshConfigMapVolumes, VolumeMountError, type ApiServerAccess, type MaterialisedVolumes } from './volumes.js'
import { forwardTcp, type Forwarder } from './tcp-forward.js'
import { ownedConditionsDiffering, podStatusPatch, type PodRuntime } from './pod-status.js'
import { podEventRecorder } from './events.js'

/** How often configMap volumes are brought up to date (a real kubelet: its sync period, about a minute). */
const CONFIGMAP_REFRESH_MS = 2000

export interface PodWorkerContext {
  readonly kc: KubeConfig
  readonly sources: PodSources
  readonly api: ApiServerAccess
  readonly images: ImageTable
  readonly backoff: Backoff
  readonly injectedEnv: Readonly<Record<string, string>>
  readonly hostIP: string
  readonly podIP: string
  /** Parent of this pod's dir (volumes) and logs. */
  readonly workDir: string
  readonly logRoot: string
  /** Appends a line to the kubelet's own log (API errors worth seeing when a test fails). */
  readonly log: (line: string) => void
  /** Called once the pod is gone (deleted from the API or forgotten). */
  readonly onGone: () => void
}

export class PodWorker {
  private pod: V1Pod
  private readonly core: CoreV1Api
  private readonly podDir: string
  readonly logDir: string
  private initRunners: ContainerRunner[] = []
  private runners: ContainerRunner[] = []
  private initialized = false
  private initFailed = false
  private terminating = false
  private gone = false
  private readonly startTime = rfc3339()
  /** Why no container could be created yet (volumes not ready). */
  private waiting: { reason: string, message: string } | undefined
  private writing = false
  private dirty = false
  /** hostPort forwarders (nodeIP:hostPort → podIP:containerPort) and the configMap refresh timer. */
  private hostPorts: Forwarder[] = []
  private refresh: NodeJS.Timeout | undefined

  constructor (pod: V1Pod, private readonly ctx: PodWorkerContext) {
    this.pod = pod
    this.core = ctx.kc.makeApiClient(CoreV1Api)
    const { namespace, name, uid } = pod.metadata ?? {}
    this.podDir = join(ctx.workDir, `${namespace ?? ''}_${name ?? ''}_${uid ?? ''}`)
    this.logDir = join(ctx.logRoot, `${namespace ?? ''}_${name ?? ''}_${uid ?? ''}`)
    mkdirSync(this.podDir, { recursive: true })
    mkdirSync(this.logDir, { recursive: true })
  }

  get uid (): string { return this.pod.metadata?.uid ?? '' }

  private key (): string { return `${this.pod.metadata?.namespace ?? ''}/${this.pod.metadata?.name ?? ''}` }

  logFile (container: string): string { return join(this.logDir, `${container}.log`) }

  /** Newer object from the watch; a deletionTimestamp starts graceful termination. */
  update (pod: V1Pod): void {
    this.pod = pod
    if (pod.metadata?.deletionTimestamp !== undefined && pod.metadata.deletionTimestamp !== null) {
      void this.terminate(pod.metadata.deletionGracePeriodSeconds ?? pod.spec?.terminationGracePeriodSeconds ?? 30)
      return
    }
    // Someone else changed a condition this kubelet owns (the node lifecycle controller marks pods
    // NotReady after missed heartbeats): write ours again, as the real kubelet's status manager does.
    if (this.runners.length > 0 && !this.terminating && ownedConditionsDiffering(pod, this.runtime()).length > 0) this.requestStatus()
  }

  async start (): Promise<void> {
    const spec = this.pod.spec ?? { containers: [] }
    const volumes = await this.prepareVolumes()
    if (volumes === undefined) return
    this.refresh = setInterval(() => { refreshConfigMapVolumes(this.pod, volumes, this.ctx.sources).catch((e: Error) => this.ctx.log(`configMap refresh of ${this.key()} failed: ${e.message}`)) }, CONFIGMAP_REFRESH_MS)
    await this.openHostPorts()
    if (this.terminating) { await this.closeHostPorts(); return }
    const context = (isInit: boolean) => ({
      pod: () => this.pod,
      addresses: { podIP: this.ctx.podIP, hostIP: this.ctx.hostIP },
      podDir: this.podDir,
      logDir: this.logDir,
      volumes,
      sources: this.ctx.sources,
      images: this.ctx.images,
      injectedEnv: { ...this.ctx.injectedEnv, HOSTNAME: spec.hostname ?? this.pod.metadata?.name ?? '' },
      backoff: this.ctx.backoff,
      onChange: () => this.requestStatus(),
      event: podEventRecorder(this.ctx.kc, () => this.pod, this.ctx.log)
    })
    this.initRunners = (spec.initContainers ?? []).map((c) => new ContainerRunner(c, context(true), true))
    this.runners = spec.containers.map((c) => new ContainerRunner(c, context(false), false))
    this.requestStatus()
    for (const runner of this.initRunners) {
      const code = await runner.run()
      if (this.terminating) return
      if (code !== 0) { this.initFailed = true; this.requestStatus(); return }
    }
    this.initialized = true
    this.requestStatus()
    await Promise.all(this.runners.map(async (runner) => await runner.run()))
    this.requestStatus()
  }

  /**
   * Retries until Secrets/ConfigMaps exist (reported as CreateContainerConfigError) and claims are
   * bound to a mountable PersistentVolume (ContainerCreating, with a FailedMount Event).
   */
  private async prepareVolumes (): Promise<MaterialisedVolumes | undefined> {
    const event = podEventRecorder(this.ctx.kc, () => this.pod, this.ctx.log)
    for (;;) {
      if (this.terminating) return undefined
      try {
        return await materialiseVolumes(this.pod, this.podDir, { podIP: this.ctx.podIP, hostIP: this.ctx.hostIP }, this.ctx.sources, this.ctx.api)
      } catch (error) {
        const message = (error as Error).message
        const reason = error instanceof ContainerConfigError ? 'CreateContainerConfigError' : 'ContainerCreating'
        this.waiting = { reason, message }
        if (error instanceof VolumeMountError) event('Warning', 'FailedMount', message)
        this.requestStatus()
        await new Promise((resolve) => setTimeout(resolve, 2000))
      }
    }
  }

  /**
   * hostPort: the node's address forwards the port to the pod (the scheduler's NodePorts filter
   * keeps two pods wanting one host port off one node, as on a real cluster). A port the node
   * cannot bind is logged and left closed, not fatal: a real node would fail the same way.
   */
  private async openHostPorts (): Promise<void> {
    for (const c of this.pod.spec?.containers ?? []) {
      for (const p of c.ports ?? []) {
        if (p.hostPort === undefined || p.hostPort === 0 || (p.protocol ?? 'TCP') !== 'TCP') continue
        try {
          this.hostPorts.push(await forwardTcp(p.hostIP ?? this.ctx.hostIP, p.hostPort, () => ({ host: this.ctx.podIP, port: p.containerPort })))
        } catch (error) {
          this.ctx.log(`hostPort ${p.hostPort} of ${this.key()} cannot be opened: ${(error as Error).message}`)
        }
      }
    }
  }

  private async closeHostPorts (): Promise<void> {
    clearInterval(this.refresh)
    const open = this.hostPorts
    this.hostPorts = []
    await Promise.all(open.map(async (f) => await f.close()))
  }

  private runtime (): PodRuntime {
    return {
      podIP: this.ctx.podIP,
      hostIP: this.ctx.hostIP,
      startTime: this.startTime,
      initContainers: this.initRunners.map((r) => r.record),
      containers: this.runners.length > 0 || this.waiting === undefined
        ? this.runners.map((r) => r.record)
        : (this.pod.spec?.containers ?? []).map((c) => ({
            name: c.name, image: c.image ?? '', state: { waiting: this.waiting }, ready: false, started: false, restartCount: 0, finished: false, everStarted: false
          })),
      initialized: this.initialized,
      initFailed: this.initFailed
    }
  }

  /** Coalesces status writes: at most one in flight, the latest state always written last. */
  requestStatus (): void {
    if (this.gone) return
    if (this.writing) { this.dirty = true; return }
    this.writing = true
    void (async () => {
      do {
        this.dirty = false
        try {
          await this.core.patchNamespacedPodStatus({
            name: this.pod.metadata?.name ?? '',
            namespace: this.pod.metadata?.namespace ?? '',
            body: podStatusPatch(this.pod, this.runtime(), rfc3339())
          }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch))
        } catch (error) {
          if ((error as { code?: number }).code === 404) { this.dirty = false; break }
          this.ctx.log(`status update of ${this.key()} failed: ${(error as Error).message}`)
          if (!this.gone) await new Promise((resolve) => setTimeout(resolve, 500))
          this.dirty = !this.gone
        }
      } while (this.dirty && !this.gone)
      this.writing = false
    })()
  }

  private async stopContainers (graceMs: number): Promise<void> {
    await Promise.all([...this.initRunners, ...this.runners].map(async (r) => { await r.stop(graceMs) }))
  }

  async terminate (graceSeconds: number): Promise<void> {
    if (this.terminating) return
    this.terminating = true
    await this.stopContainers(graceSeconds * 1000)
    this.requestStatus()
    try {
      await this.core.deleteNamespacedPod({
        name: this.pod.metadata?.name ?? '',
        namespace: this.pod.metadata?.namespace ?? '',
        gracePeriodSeconds: 0,
        body: { gracePeriodSeconds: 0, preconditions: { uid: this.uid } }
      })
    } catch (error) {
      // 404/409: already deleted (and maybe recreated under the same name).
      if (![404, 409].includes((error as { code?: number }).code ?? 0)) this.ctx.log(`final delete of ${this.key()} failed: ${(error as Error).message}`)
    }
    this.forget()
  }

  /** The pod is gone from the API (or the kubelet stops): kill at once and drop local state. */
  async kill (): Promise<void> {
    this.terminating = true
    await this.stopContainers(0)
    this.forget()
  }

  private forget (): void {
    if (this.gone) return
    this.gone = true
    void this.closeHostPorts()
    rmSync(this.podDir, { recursive: true, force: true })
    this.ctx.onGone()
  }
}
