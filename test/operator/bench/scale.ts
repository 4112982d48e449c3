/**
 * Benchmark (not a test): the operator reconciling one large swarm on kwok nodes (pods go
 * Running/Ready without processes). Prints a markdown table: time from apply to all pods
 * created and to status Ready, API requests per reconcile, writes at steady state, memory.
 * Usage: npm run build && node_modules/.bin/node dist/test/operator/bench/scale.js [agents=1000]
 */
import { readFileSync } from 'node:fs'
import { startCluster, waitFor } from '../../harness/index.js'
import { RestClient } from '../../../operator/kube/rest.js'
import { resourcePath } from '../../../operator/kube/resources.js'
import { startOperator } from '../e2e/operator-process.js'

const N = Number(process.argv[2] ?? 1000)
const NS = 'bench'
const sleep = async (ms: number) => await new Promise(resolve => setTimeout(resolve, ms))

function vm (pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  return m === null ? NaN : Number(m[1]) / 1024
}

async function main (): Promise<void> {
  const nodes = Math.ceil(N / 8) + 2
  const cluster = await startCluster({ gpuNodes: 0, cpuNodes: 1, kwokNodes: nodes, kwokGpusPerNode: 8 })
  const rest = new RestClient(cluster.kc)
  const op = await startOperator(cluster.kubeconfigPath, cluster.logDir, 'operator-bench', ['--progress-interval-seconds', '15', '--log-level', 'info', '--workers', '4'])
  try {
    await cluster.createNamespace(NS)
    const r = await cluster.kubectl('apply', '--server-side', '-f', 'crds/averagingswarm.yaml')
    if (r.code !== 0) throw new Error(r.stderr)
    // Poll rather than `kubectl wait`, which fails outright while the CRD has no conditions yet.
    await waitFor('the CRD to be Established', async () => ((await rest.request('GET', resourcePath('CustomResourceDefinition', undefined, 'averagingswarms.averaging.swarm.io'))).status?.conditions ?? [])
      .some((c: { type: string, status: string }) => c.type === 'Established' && c.status === 'True'), 60_000)
    await waitFor('operator ready', async () => await op.ready(), 60_000)
    await sleep(2000)
    const req0 = await op.metric('rest_client_requests_total') ?? 0
    const rec0 = await op.metric('controller_runtime_reconcile_total') ?? 0

    const podCount = async () => {
      const l = await rest.request('GET', resourcePath('Pod', NS), { query: { labelSelector: 'averaging.swarm.io/swarm=big', limit: 1 } })
      return (l.items.length as number) + Number(l.metadata.remainingItemCount ?? 0)
    }
    const t0 = Date.now()
    await rest.request('POST', resourcePath('AveragingSwarm', NS), {
      body: {
        apiVersion: 'averaging.swarm.io/v1alpha1', kind: 'AveragingSwarm', metadata: { name: 'big', namespace: NS },
        spec: { replicas: N, bootstrap: { replicas: 2 }, resources: { limits: { 'nvidia.com/gpu': 1 } }, tolerations: [{ key: 'nvidia.com/gpu', operator: 'Exists', effect: 'NoSchedule' }] }
      }
    })
    let tCreated = 0
    let peakRss = 0
    const status = await waitFor(`status Ready with ${N} agents`, async () => {
      peakRss = Math.max(peakRss, vm(op.child.pid!, 'VmRSS'))
      if (tCreated === 0 && await podCount() >= N) tCreated = Date.now() - t0
      const s = (await rest.request('GET', resourcePath('AveragingSwarm', NS, 'big'))).status
      return s?.phase === 'Ready' && s.readyReplicas === N ? s : undefined
    }, 1_800_000, 1000)
    const tReady = Date.now() - t0
    if (tCreated === 0) tCreated = tReady
    const req1 = await op.metric('rest_client_requests_total') ?? 0
    const rec1 = await op.metric('controller_runtime_reconcile_total') ?? 0
    const writes1 = await op.metric('averagingswarm_operator_writes_total') ?? 0

    // Steady state: wait until no write for 10 s, then queue reconciles and count what they send.
    await waitFor('quiet', async () => { const a = await op.metric('averagingswarm_operator_writes_total'); await sleep(10_000); return a === await op.metric('averagingswarm_operator_writes_total') }, 600_000, 0)
    const w2 = await op.metric('averagingswarm_operator_writes_total') ?? 0
    const q2 = await op.metric('rest_client_requests_total') ?? 0
    const c2 = await op.metric('controller_runtime_reconcile_total') ?? 0
    for (let i = 0; i < 10; i++) { await cluster.kubectl('annotate', '-n', NS, 'avs/big', `touch=${i}`, '--overwrite'); await sleep(500) }
    await sleep(5000)
    const w3 = await op.metric('averagingswarm_operator_writes_total') ?? 0
    const q3 = await op.metric('rest_client_requests_total') ?? 0
    const c3 = await op.metric('controller_runtime_reconcile_total') ?? 0
    const time = (await op.metric('controller_runtime_reconcile_time_seconds_sum') ?? 0) / (await op.metric('controller_runtime_reconcile_time_seconds_count') ?? 1)

    console.log(`\n| metric | ${N} agents on ${nodes} kwok nodes |\n|---|---|`)
    console.log(`| apply → all ${N} pods created | ${(tCreated / 1000).toFixed(1)} s |`)
    console.log(`| apply → status Ready, readyReplicas ${status.readyReplicas} | ${(tReady / 1000).toFixed(1)} s |`)
    console.log(`| reconciles during rollout | ${rec1 - rec0} |`)
    console.log(`| API requests during rollout (incl. lease, lists, status) | ${req1 - req0} (${((req1 - req0) / Math.max(1, rec1 - rec0)).toFixed(2)} per reconcile) |`)
    console.log(`| writes during rollout (apply, delete, status) | ${writes1} |`)
    console.log(`| steady state: reconciles / writes / API requests (lease renewals included) | ${c3 - c2} / ${w3 - w2} / ${q3 - q2} |`)
    console.log(`| mean reconcile time | ${(time * 1000).toFixed(1)} ms |`)
    console.log(`| operator RSS now / peak sampled / VmHWM | ${vm(op.child.pid!, 'VmRSS').toFixed(0)} / ${peakRss.toFixed(0)} / ${vm(op.child.pid!, 'VmHWM').toFixed(0)} MiB |`)
    console.log(`| cluster start | ${(cluster.startupMs / 1000).toFixed(1)} s |`)
  } finally {
    await op.kill()
    await cluster.stop()
  }
}

main().catch((e: unknown) => { console.error(e instanceof Error ? e.message : e); process.exit(1) })
