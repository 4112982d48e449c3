/**
 * The test cluster's kube-proxy and load-balancer controller, for Services of type NodePort and
 * LoadBalancer (the cluster has neither: no kube-proxy, no cloud controller). What it fakes:
 *  - node ports: every node address (127.<b>.0.<n>) listens on each allocated nodePort and
 *    forwards to a Running, ready-or-not pod the Service selects (publishNotReadyAddresses is not
 *    consulted: like kube-proxy with it set), at the targetPort (a number or a container port name);
 *    externalTrafficPolicy Local is honoured by answering only on the chosen pod's node;
 *  - load balancers without a loadBalancerClass: a fresh loopback address becomes
 *    status.loadBalancer.ingress[0].ip and listens on each Service port, forwarding the same way.
 * Plain TCP forwarding (tcp-forward.ts): the pod sees the proxy as the client, as with SNAT.
 * Endpoints are looked up per connection from the API (the cluster's EndpointSlices stay empty).
 */
import { CoreV1Api, ListWatch, PatchStrategy, Watch, setHeaderOptions, type KubeConfig, type V1Pod, type V1Service } from '@kubernetes/client-node'
import { forwardTcp, type Forwarder } from './tcp-forward.js'

export interface ServiceProxyOptions {
  readonly kc: KubeConfig
  /** name and address of every node the kubelet runs. */
  readonly nodes: ReadonlyArray<{ readonly name: string, readonly address: string }>
  /** A fresh loopback address for a load balancer's ingress. */
  readonly nextAddress: () => string
  readonly log: (line: string) => void
}

interface Proxied { readonly version: string, readonly forwarders: Forwarder[], readonly ingress?: string }

export class ServiceProxy {
  private readonly core: CoreV1Api
  private readonly proxied = new Map<string, Proxied>()
  private readonly pods = new Map<string, V1Pod>()
  private informers: Array<ListWatch<any>> = []
  private stopped = false

  constructor (private readonly options: ServiceProxyOptions) {
    this.core = options.kc.makeApiClient(CoreV1Api)
  }

  async start (): Promise<void> {
    const pods = new ListWatch<V1Pod>('/api/v1/pods', new Watch(this.options.kc), async () => await this.core.listPodForAllNamespaces())
    for (const verb of ['add', 'update'] as const) pods.on(verb, (p) => this.pods.set(key(p), p))
    pods.on('delete', (p) => this.pods.delete(key(p)))
    const services = new ListWatch<V1Service>('/api/v1/services', new Watch(this.options.kc), async () => await this.core.listServiceForAllNamespaces())
    for (const verb of ['add', 'update'] as const) services.on(verb, (s) => { void this.sync(s) })
    services.on('delete', (s) => { void this.drop(key(s)) })
    for (const lw of [pods, services]) {
      lw.on('error', (error: Error | undefined) => {
        if (this.stopped) return
        this.options.log(`service proxy watch failed, restarting: ${error?.message ?? 'unknown error'}`)
        setTimeout(() => { if (!this.stopped) void lw.start() }, 1000)
      })
    }
    this.informers = [pods, services]
    await Promise.all(this.informers.map(async (lw) => await lw.start()))
  }

  async stop (): Promise<void> {
    this.stopped = true
    await Promise.all(this.informers.map(async (lw) => await lw.stop()))
    await Promise.all([...this.proxied.keys()].map(async (k) => await this.drop(k)))
  }

  /** (Re)opens the forwarders of a Service whose ports or type changed. */
  private async sync (svc: V1Service): Promise<void> {
    const k = key(svc)
    const type = svc.spec?.type ?? 'ClusterIP'
    const lb = type === 'LoadBalancer' && (svc.spec?.loadBalancerClass ?? '') === ''
    if (type !== 'NodePort' && type !== 'LoadBalancer') { await this.drop(k); return }
    const version = JSON.stringify([type, svc.spec?.ports, svc.spec?.externalTrafficPolicy])
    const current = this.proxied.get(k)
    if (current?.version === version) return
    const ingress = current?.ingress ?? (lb ? this.options.nextAddress() : undefined)
    await this.drop(k)
    const forwarders: Forwarder[] = []
    this.proxied.set(k, { version, forwarders, ingress })
    for (const port of svc.spec?.ports ?? []) {
      if ((port.protocol ?? 'TCP') !== 'TCP') continue
      const listen: Array<[string, number, string | undefined]> = []
      if (port.nodePort !== undefined) for (const n of this.options.nodes) listen.push([n.address, port.nodePort, n.name])
      if (ingress !== undefined) listen.push([ingress, port.port, undefined])
      for (const [host, p, nodeName] of listen) {
        try {
          forwarders.push(await forwardTcp(host, p, () => this.endpoint(svc, port.targetPort ?? port.port, nodeName)))
        } catch (error) {
          this.options.log(`service proxy: ${k} cannot listen on ${host}:${p}: ${(error as Error).message}`)
        }
      }
    }
    if (ingress !== undefined && (svc.status?.loadBalancer?.ingress?.[0]?.ip !== ingress)) {
      try {
        await this.core.patchNamespacedServiceStatus({ name: svc.metadata?.name ?? '', namespace: svc.metadata?.namespace ?? '', body: { status: { loadBalancer: { ingress: [{ ip: ingress }] } } } },
          setHeaderOptions('Content-Type', PatchStrategy.MergePatch))
      } catch (error) {
        this.options.log(`service proxy: cannot write the ingress of ${k}: ${(error as Error).message}`)
      }
    }
  }

  private async drop (k: string): Promise<void> {
    const p = this.proxied.get(k)
    if (p === undefined) return
    this.proxied.delete(k)
    await Promise.all(p.forwarders.map(async (f) => await f.close()))
  }

  /** A Running pod the Service selects (on nodeName for externalTrafficPolicy Local), at targetPort. */
  private endpoint (svc: V1Service, targetPort: number | string, nodeName: string | undefined): { host: string, port: number } | undefined {
    const selector = svc.spec?.selector ?? {}
    if (Object.keys(selector).length === 0) return undefined
    const local = svc.spec?.externalTrafficPolicy === 'Local'
    const pods = [...this.pods.values()].filter(p => p.metadata?.namespace === svc.metadata?.namespace && p.status?.phase === 'Running' && p.status.podIP !== undefined &&
      p.metadata?.deletionTimestamp == null && Object.entries(selector).every(([k, v]) => p.metadata?.labels?.[k] === v) && (!local || nodeName === undefined || p.spec?.nodeName === nodeName))
    const pod = pods[Math.floor(Math.random() * pods.length)]
    if (pod === undefined) return undefined
    const port = typeof targetPort === 'number' ? targetPort : pod.spec?.containers.flatMap(c => c.ports ?? []).find(cp => cp.name === targetPort)?.containerPort
    return port === undefined ? undefined : { host: pod.status?.podIP ?? '', port }
  }
}

function key (o: { metadata?: { namespace?: string, name?: string } }): string { return `${o.metadata?.namespace ?? ''}/${o.metadata?.name ?? ''}` }
