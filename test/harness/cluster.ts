/**
 * startCluster(): a real Kubernetes control plane on loopback plus fake GPU nodes, ready to use.
 * See test/harness/README.md. Everything it starts is torn down by stop(), and also on SIGINT,
 * SIGTERM and process exit (see cleanup.ts).
 */
import { mkdtempSync, rmSync, mkdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { execFile } from 'node:child_process'
import { CoreV1Api, KubeConfig, type V1Node } from '@kubernetes/client-node'
import { startControlPlane, type ControlPlane, type ApiserverRestart, type ApiserverRestartOptions } from './control-plane.js'
import { startDnsServer, type DnsServer } from './dns/server.js'
import { TestKubelet } from './kubelet/kubelet.js'
import { claimAddressBlock, type AddressBlock } from './kubelet/address-block.js'
import type { NodeShape } from './kubelet/node-object.js'
import type { ImageTable } from './kubelet/images.js'
import type { Backoff } from './kubelet/container.js'
import { startKwok, type Kwok } from './kwok.js'
import { onTeardown } from './cleanup.js'
import { watchDir, unwatchDir } from './reaper.js'
import { binary } from './paths.js'
import { sleep } from './time.js'
import { agentEnv } from '../../agent/process/agent-process.js'

export interface ClusterOptions {
  /** Nodes run by the test kubelet with `gpusPerNode` nvidia.com/gpu each and the GPU taint. Default 2. */
  readonly gpuNodes?: number
  readonly gpusPerNode?: number
  /** Untainted nodes without GPUs (for the operator's own Deployment). Default 1. */
  readonly cpuNodes?: number
  /** Fake GPU nodes managed by kwok (pods become Running without processes). Default 0. */
  readonly kwokNodes?: number
  readonly kwokGpusPerNode?: number
  /** Per-node capacity. Defaults: cpu "16", memory "64Gi", pods 110. */
  readonly nodeCpu?: string
  readonly nodeMemory?: string
  readonly maxPodsPerNode?: number
  /** Extra image → command mappings for the test kubelet, tried before the defaults. */
  readonly images?: ImageTable
  /** Container restart back-off. Default 1 s doubling to 30 s (the real kubelet: 10 s to 300 s). */
  readonly restartBackoff?: Backoff
  /** Working directory; default a fresh mkdtemp under the OS temp dir. */
  readonly dir?: string
  /** Keep the directory (logs, etcd data) after stop(). Default: env AVS_KEEP_CLUSTER=1. */
  readonly keepDir?: boolean
  readonly readyTimeoutMs?: number
  readonly apiserverArgs?: readonly string[]
}

export interface Cluster {
  readonly dir: string
  readonly server: string
  /** Admin kubeconfig (system:masters): for kubectl (KUBECONFIG=...) and client-node. */
  readonly kubeconfigPath: string
  readonly kc: KubeConfig
  /** "127.0.0.1:<port>" of the cluster DNS (what pods get as AVS_DNS_SERVERS). */
  readonly dnsAddress: string
  readonly dns: DnsServer
  readonly nodeNames: readonly string[]
  readonly kwokNodeNames: readonly string[]
  /** Directory of etcd/apiserver/controller-manager/scheduler/kwok logs. */
  readonly logDir: string
  /** Milliseconds from startCluster() to ready nodes. */
  readonly startupMs: number
  /**
   * Path of a container's log file (appended across restarts), if the test kubelet ran that pod;
   * the latest pod of that name unless `uid` names an earlier one.
   */
  containerLogFile: (namespace: string, pod: string, container: string, uid?: string) => string | undefined
  /** Runs the built kubectl against this cluster. */
  kubectl: (...args: string[]) => Promise<{ code: number, stdout: string, stderr: string }>
  /** Creates a namespace and waits until its "default" ServiceAccount exists (pods need it). */
  createNamespace: (name: string, labels?: Record<string, string>) => Promise<void>
  /** Restarts kube-apiserver on the same port (fault injection); resolves once /readyz is 200. */
  restartApiserver: (options?: ApiserverRestartOptions) => Promise<ApiserverRestart>
  stop: () => Promise<void>
}

function shapes (prefix: string, count: number, gpus: number, block: AddressBlock, offset: number, options: ClusterOptions): NodeShape[] {
  return Array.from({ length: count }, (_, i) => ({
    name: `${prefix}-${i}`,
    address: block.nodeAddress(offset + i),
    gpus,
    cpu: options.nodeCpu ?? '16',
    memory: options.nodeMemory ?? '64Gi',
    pods: options.maxPodsPerNode ?? 110,
    gpuTaint: true
  }))
}

async function waitForNodesReady (core: CoreV1Api, names: readonly string[], timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs
  const ready = (node: V1Node): boolean =>
    node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true &&
    !(node.spec?.taints ?? []).some((t) => t.key === 'node.kubernetes.io/not-ready' || t.key === 'node.kubernetes.io/unreachable')
  for (;;) {
    const nodes = (await core.listNode()).items
    const pending = names.filter((name) => { const node = nodes.find((n) => n.metadata?.name === name); return node === undefined || !ready(node) })
    if (pending.length === 0) return
    if (Date.now() > deadline) throw new Error(`Nodes ${pending.join(', ')} did not become Ready (or keep the not-ready taint) within ${timeoutMs / 1000} s.`)
    await sleep(250)
  }
}

async function waitForServiceAccount (core: CoreV1Api, namespace: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    try { await core.readNamespacedServiceAccount({ namespace, name: 'default' }); return } catch {}
    if (Date.now() > deadline) throw new Error(`Namespace ${namespace} got no default ServiceAccount within ${timeoutMs / 1000} s (is kube-controller-manager running?).`)
    await sleep(100)
  }
}

export async function startCluster (options: ClusterOptions = {}): Promise<Cluster> {
  const started = Date.now()
  const timeout = options.readyTimeoutMs ?? 90_000
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), 'avs-cluster-'))
  mkdirSync(dir, { recursive: true })
  const keepDir = options.keepDir ?? process.env.AVS_KEEP_CLUSTER === '1'
  const block = claimAddressBlock()
  if (!keepDir) watchDir(dir)
  let controlPlane: ControlPlane | undefined
  let dns: DnsServer | undefined
  let kubelet: TestKubelet | undefined
  let kwok: Kwok | undefined
  let stopping: Promise<void> | undefined
  // One shared promise: a signal arriving during a normal stop() waits for it instead of racing it.
  const stop = async (): Promise<void> => {
    stopping ??= (async () => {
      await kubelet?.stop()
      await kwok?.stop()
      await dns?.stop()
      await controlPlane?.stop()
      block.release()
      if (!keepDir) rmSync(dir, { recursive: true, force: true })
      unwatchDir(dir)
    })()
    await stopping
  }
  const unregister = onTeardown(stop)
  try {
    controlPlane = await startControlPlane({ dir, readyTimeoutMs: timeout, apiserverArgs: options.apiserverArgs })
    const kc = new KubeConfig()
    kc.loadFromFile(controlPlane.kubeconfigPath)
    const core = kc.makeApiClient(CoreV1Api)
    dns = await startDnsServer(kc)
    const gpuNodes = shapes('gpu-node', options.gpuNodes ?? 2, options.gpusPerNode ?? 1, block, 0, options)
    const cpuNodes = shapes('cpu-node', options.cpuNodes ?? 1, 0, block, 100, options)
    const kwokShapes = shapes('kwok-gpu-node', options.kwokNodes ?? 0, options.kwokGpusPerNode ?? 8, block, 200, options)
    const kubeletNodes = [...gpuNodes, ...cpuNodes]
    if (kubeletNodes.length > 0) {
      kubelet = new TestKubelet({
        kc,
        nodes: kubeletNodes,
        api: { server: controlPlane.server, caCertFile: controlPlane.pki.caCert },
        addresses: block,
        workDir: join(dir, 'kubelet'),
        injectedEnv: {
          ...agentEnv({ dnsServers: dns.address }),
          KUBERNETES_SERVICE_HOST: '127.0.0.1',
          KUBERNETES_SERVICE_PORT: String(controlPlane.apiserverPort)
        },
        images: options.images,
        restartBackoff: options.restartBackoff,
        servingTls: { cert: controlPlane.pki.servingCert, key: controlPlane.pki.servingKey }
      })
      await kubelet.start()
    }
    if (kwokShapes.length > 0) kwok = await startKwok(kc, controlPlane.kubeconfigPath, kwokShapes, controlPlane.logDir)
    await Promise.all([
      waitForNodesReady(core, [...kubeletNodes, ...kwokShapes].map((n) => n.name), timeout),
      waitForServiceAccount(core, 'default', timeout)
    ])
    const kubeconfigPath = controlPlane.kubeconfigPath
    const theKubelet = kubelet
    return {
      dir,
      server: controlPlane.server,
      kubeconfigPath,
      kc,
      dnsAddress: dns.address,
      dns,
      nodeNames: kubeletNodes.map((n) => n.name),
      kwokNodeNames: kwokShapes.map((n) => n.name),
      logDir: controlPlane.logDir,
      startupMs: Date.now() - started,
      containerLogFile: (namespace, pod, container, uid) => theKubelet?.containerLogFile(namespace, pod, container, uid),
      kubectl: async (...args) => await new Promise((resolve) => {
        execFile(binary('kubectl'), args, { env: { ...process.env, KUBECONFIG: kubeconfigPath } }, (error, stdout, stderr) => {
          resolve({ code: error === null ? 0 : (typeof error.code === 'number' ? error.code : 1), stdout, stderr })
        })
      }),
      createNamespace: async (name, labels) => {
        await core.createNamespace({ body: { metadata: { name, labels } } })
        await waitForServiceAccount(core, name, 30_000)
      },
      restartApiserver: async (o) => await (controlPlane as ControlPlane).restartApiserver(o),
      stop: async () => { await stop(); unregister() }
    }
  } catch (error) {
    await stop()
    unregister()
    throw error
  }
}
