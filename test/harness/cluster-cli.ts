/**
 * `npm run cluster:up` / `npm run cluster:down`: a test cluster for a person. `up` starts the
 * control plane and fake GPU nodes, writes a kubeconfig to a fixed path, prints how to use it, and
 * stays in the foreground until Ctrl-C or `down` (which signals the pid in the state file).
 */
import { parseArgs } from 'node:util'
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { homedir } from 'node:os'
import { join } from 'node:path'
import { startCluster, controlPlaneBuilt, binary, type Cluster as TestCluster } from './index.js'
import { AGENT_ENV } from '../../api/agent-env.js'

const stateDir = join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'averaging-swarm', 'cluster-up')
const pidFile = join(stateDir, 'pid')
const kubeconfigCopy = join(stateDir, 'kubeconfig')

function alive (pid: number): boolean {
  try { process.kill(pid, 0); return true } catch { return false }
}

function runningPid (): number | undefined {
  if (!existsSync(pidFile)) return undefined
  const pid = Number.parseInt(readFileSync(pidFile, 'utf8'), 10)
  return Number.isFinite(pid) && alive(pid) ? pid : undefined
}

interface UpOptions { readonly gpuNodes: number, readonly gpusPerNode: number, readonly cpuNodes: number, readonly kwokNodes: number }

function parseUpOptions (argv: string[]): UpOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      'gpu-nodes': { type: 'string', default: '4' },
      'gpus-per-node': { type: 'string', default: '1' },
      'cpu-nodes': { type: 'string', default: '1' },
      'kwok-nodes': { type: 'string', default: '0' }
    }
  })
  const n = (v: string | undefined): number => Number.parseInt(v ?? '0', 10)
  return { gpuNodes: n(values['gpu-nodes']), gpusPerNode: n(values['gpus-per-node']), cpuNodes: n(values['cpu-nodes']), kwokNodes: n(values['kwok-nodes']) }
}

/** What a person needs to use the cluster just started. */
function readyMessage (cluster: TestCluster): string {
  let kubectl = 'kubectl'
  try { kubectl = binary('kubectl') } catch {}
  return `
Test cluster ready in ${(cluster.startupMs / 1000).toFixed(1)} s: API server ${cluster.server}
  nodes: ${[...cluster.nodeNames, ...cluster.kwokNodeNames].join(', ')}
  cluster DNS: ${cluster.dnsAddress} (pods get it as ${AGENT_ENV.dnsServers.name})
  component logs: ${cluster.logDir}
  pod logs: ${join(cluster.dir, 'kubelet', 'logs')}

  export KUBECONFIG=${kubeconfigCopy}
  ${kubectl} get nodes

kubectl ${kubectl === 'kubectl' ? '' : `(built with the control plane: ${kubectl}) `}works with it, \`logs\` included (not \`exec\`/\`port-forward\`).
Press Ctrl-C here, or run \`npm run cluster:down\`, to stop it.`
}

/** Ctrl-C or `down` (SIGTERM) stops the cluster, removes the state files and exits. */
function stopOnSignals (cluster: TestCluster): void {
  const shutdown = async (): Promise<void> => {
    console.log('Stopping the test cluster...')
    await cluster.stop()
    rmSync(pidFile, { force: true })
    rmSync(kubeconfigCopy, { force: true })
    console.log('Test cluster stopped.')
    process.exit(0)
  }
  process.removeAllListeners('SIGINT')
  process.removeAllListeners('SIGTERM')
  process.once('SIGINT', () => { void shutdown() })
  process.once('SIGTERM', () => { void shutdown() })
}

async function up (argv: string[]): Promise<void> {
  const options = parseUpOptions(argv)
  const other = runningPid()
  if (other !== undefined) throw new Error(`A test cluster is already up (pid ${other}); run \`npm run cluster:down\` first.`)
  if (!controlPlaneBuilt()) throw new Error('The control plane is not built yet: run `npm run cluster:build` first.')
  console.log('Starting the test cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, test kubelet)...')
  const cluster = await startCluster(options)
  mkdirSync(stateDir, { recursive: true })
  copyFileSync(cluster.kubeconfigPath, kubeconfigCopy)
  writeFileSync(pidFile, String(process.pid))
  console.log(readyMessage(cluster))
  stopOnSignals(cluster)
  await new Promise(() => {})
}

async function down (): Promise<void> {
  const pid = runningPid()
  if (pid === undefined) { console.log('No test cluster is up.'); rmSync(pidFile, { force: true }); return }
  process.kill(pid, 'SIGTERM')
  const deadline = Date.now() + 60_000
  while (alive(pid)) {
    if (Date.now() > deadline) { process.kill(pid, 'SIGKILL'); break }
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  rmSync(pidFile, { force: true })
  console.log(`Test cluster (pid ${pid}) stopped.`)
}

const [command, ...rest] = process.argv.slice(2)
try {
  if (command === 'up') await up(rest)
  else if (command === 'down') await down()
  else throw new Error('Usage: cluster-cli.js up [--gpu-nodes N] [--gpus-per-node N] [--cpu-nodes N] [--kwok-nodes N] | cluster-cli.js down')
} catch (error) {
  console.error((error as Error).message)
  process.exitCode = 1
  process.exit(1)
}
