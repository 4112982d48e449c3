/**
 * Starts the real control plane as four local processes on free loopback ports: etcd, then
 * kube-apiserver (waits for /readyz: bootstrap RBAC comes from its post-start hooks), then
 * kube-controller-manager and kube-scheduler (wait for /healthz). Each writes its own log file.
 */
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { binary } from './paths.js'
import { freePorts } from '../../agent/util/ports.js'
import { makePki, type Pki } from './pki.js'
import { writeKubeconfig } from './kubeconfig.js'
import { startGroupProcess, type GroupProcess } from './process-group.js'
import { waitForHttpOk } from './readiness.js'

export interface ControlPlaneOptions {
  /** Directory for data, certificates, kubeconfig and logs. */
  readonly dir: string
  /** Per-component readiness timeout. */
  readonly readyTimeoutMs?: number
  /** Extra kube-apiserver flags, e.g. ['--feature-gates=...']. */
  readonly apiserverArgs?: readonly string[]
  readonly verbosity?: number
}

export interface ControlPlane {
  readonly server: string
  readonly apiserverPort: number
  readonly pki: Pki
  readonly kubeconfigPath: string
  readonly logDir: string
  readonly processes: ReadonlyMap<string, GroupProcess>
  /**
   * Stops kube-apiserver (SIGTERM, or SIGKILL for a crash), waits downMs, starts it again with
   * the same flags on the same port and waits for /readyz. Clients keep their kubeconfigs.
   */
  restartApiserver: (options?: ApiserverRestartOptions) => Promise<ApiserverRestart>
  stop: () => Promise<void>
}

export interface ApiserverRestartOptions {
  readonly signal?: 'SIGTERM' | 'SIGKILL'
  /** Extra time the API server stays down after it exited. Default 0. */
  readonly downMs?: number
}

export interface ApiserverRestart {
  /** From the stop signal to the old process's exit. */
  readonly stopMs: number
  /** From the stop signal to /readyz answering 200 again: how long clients saw no API. */
  readonly unavailableMs: number
}

export async function startControlPlane (options: ControlPlaneOptions): Promise<ControlPlane> {
  const timeout = options.readyTimeoutMs ?? 60_000
  const logDir = join(options.dir, 'logs')
  mkdirSync(logDir, { recursive: true })
  const pki = makePki(join(options.dir, 'pki'))
  const [etcdPort, peerPort, apiPort, kcmPort, schedPort] = await freePorts(5)
  const server = `https://127.0.0.1:${apiPort}`
  const kubeconfigPath = writeKubeconfig(join(options.dir, 'admin.kubeconfig'), server, pki.caCert,
    { name: 'avs-admin', clientCertFile: pki.adminCert, clientKeyFile: pki.adminKey })
  const processes = new Map<string, GroupProcess>()
  const v = `--v=${options.verbosity ?? 1}`
  const start = (name: string, args: string[]): GroupProcess => {
    const proc = startGroupProcess({ command: binary(name as 'etcd'), args, logFile: join(logDir, `${name}.log`), cwd: options.dir })
    processes.set(name, proc)
    return proc
  }
  const stop = async (): Promise<void> => {
    // Reverse start order: clients first, etcd last, so nothing logs storms of connection errors.
    for (const name of ['kube-scheduler', 'kube-controller-manager', 'kube-apiserver', 'etcd']) {
      await processes.get(name)?.stop(5000)
    }
  }
  let apiserverArgs: string[] = []
  try {
    const etcdUrl = `http://127.0.0.1:${etcdPort}`
    const peerUrl = `http://127.0.0.1:${peerPort}`
    const etcd = start('etcd', ['--name=avs', `--data-dir=${join(options.dir, 'etcd')}`,
      `--listen-client-urls=${etcdUrl}`, `--advertise-client-urls=${etcdUrl}`,
      `--listen-peer-urls=${peerUrl}`, `--initial-advertise-peer-urls=${peerUrl}`,
      `--initial-cluster=avs=${peerUrl}`, '--unsafe-no-fsync', '--log-level=warn'])
    await waitForHttpOk('etcd', `${etcdUrl}/health`, etcd, timeout)

    apiserverArgs = [`--etcd-servers=${etcdUrl}`,
      '--bind-address=127.0.0.1', '--advertise-address=127.0.0.1', `--secure-port=${apiPort}`,
      `--cert-dir=${pki.dir}`, `--tls-cert-file=${pki.servingCert}`, `--tls-private-key-file=${pki.servingKey}`,
      `--client-ca-file=${pki.caCert}`,
      '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
      `--service-account-key-file=${pki.serviceAccountPublicKey}`,
      `--service-account-signing-key-file=${pki.serviceAccountPrivateKey}`,
      '--service-cluster-ip-range=10.0.0.0/24', '--authorization-mode=Node,RBAC', '--allow-privileged=true',
      // The "kubernetes" Service endpoint would be 127.0.0.1, which Endpoints validation rejects.
      '--endpoint-reconciler-type=none',
      // Nodes' Hostname addresses do not resolve; `kubectl logs` reaches the test kubelet by IP.
      '--kubelet-preferred-address-types=InternalIP', v, ...(options.apiserverArgs ?? [])]
    const apiserver = start('kube-apiserver', apiserverArgs)
    await waitForHttpOk('kube-apiserver', `${server}/readyz`, apiserver, timeout, { ca: pki.caCert })

    const allow = '--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics'
    const kcm = start('kube-controller-manager', [`--kubeconfig=${kubeconfigPath}`,
      '--bind-address=127.0.0.1', `--secure-port=${kcmPort}`, '--leader-elect=false', allow,
      `--service-account-private-key-file=${pki.serviceAccountPrivateKey}`, `--root-ca-file=${pki.caCert}`,
      `--cert-dir=${join(options.dir, 'kcm-certs')}`, '--kube-api-qps=100', '--kube-api-burst=200', v])
    const scheduler = start('kube-scheduler', [`--kubeconfig=${kubeconfigPath}`,
      '--bind-address=127.0.0.1', `--secure-port=${schedPort}`, '--leader-elect=false', allow,
      `--cert-dir=${join(options.dir, 'scheduler-certs')}`, '--kube-api-qps=100', '--kube-api-burst=200', v])
    await Promise.all([
      waitForHttpOk('kube-controller-manager', `https://127.0.0.1:${kcmPort}/healthz`, kcm, timeout),
      waitForHttpOk('kube-scheduler', `https://127.0.0.1:${schedPort}/healthz`, scheduler, timeout)
    ])
  } catch (error) {
    await stop()
    throw error
  }
  const restartApiserver = async (o: ApiserverRestartOptions = {}): Promise<ApiserverRestart> => {
    const old = processes.get('kube-apiserver')
    const t0 = Date.now()
    if (old !== undefined) {
      old.signal(o.signal ?? 'SIGTERM')
      await (o.signal === 'SIGKILL' ? old.exited : old.stop(30_000))
    }
    const stopMs = Date.now() - t0
    if ((o.downMs ?? 0) > 0) await new Promise((resolve) => setTimeout(resolve, o.downMs))
    const fresh = start('kube-apiserver', apiserverArgs)
    await waitForHttpOk('kube-apiserver', `${server}/readyz`, fresh, timeout, { ca: pki.caCert })
    return { stopMs, unavailableMs: Date.now() - t0 }
  }
  return { server, apiserverPort: apiPort, pki, kubeconfigPath, logDir, processes, restartApiserver, stop }
}
