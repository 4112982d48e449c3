/**
 * The chart installed by the real helm on the real test cluster: `helm install` into a namespace
 * that enforces Pod Security "restricted" starts the operator (the test kubelet runs the image
 * averaging-swarm/operator as this checkout's dist/operator/main.js) under the chart's own RBAC,
 * which then reconciles a swarm; `helm upgrade` to two replicas (one leader) also upgrades the CRD; `helm uninstall`
 * removes the operator but keeps the CRD and the swarms (crds.keep).
 */
import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { controlPlaneBuilt, startCluster, waitFor, type Cluster } from '../harness/index.js'
import { RestClient } from '../../operator/kube/rest.js'
import { isKind, resourcePath } from '../../operator/kube/resources.js'
import { CHART, helmBinary, runHelm, type HelmResult } from '../charts/helm.js'

const OP_NS = 'avs-system'
const NS = 'ml'
const RELEASE = 'avs'
const DEPLOYMENT = 'avs-averaging-swarm'
const CRD = 'averagingswarms.averaging.swarm.io'
const AGENT_BUILT = existsSync('dist/agent-bundle/main.js')
const helm = helmBinary()
const skip = !controlPlaneBuilt() ? 'the control plane is not built: run npm run cluster:build'
  : helm === undefined ? 'the helm layer package is not installed: run npm ci'
    : !existsSync('dist/operator/main.js') ? 'the operator is not built' : false

/** Three agents (one bootstrap) on fake GPU nodes: small enough for a 2-core machine. */
const SWARM = {
  apiVersion: 'averaging.swarm.io/v1alpha1',
  kind: 'AveragingSwarm',
  metadata: { name: 'small', namespace: NS },
  spec: {
    replicas: 3,
    resources: { limits: { 'nvidia.com/gpu': 1 } },
    tolerations: [{ key: 'nvidia.com/gpu', operator: 'Exists', effect: 'NoSchedule' }],
    averaging: { targetGroupSize: 3, minGroupSize: 2, period: '5s' },
    bootstrap: { replicas: 1 },
    workload: { type: 'builtin' }
  }
}

/** REST paths, including the kinds the operator itself never touches. */
function pathOf (kind: string, ns: string | undefined, name: string): string {
  if (kind === 'Deployment') return `/apis/apps/v1/namespaces/${ns}/deployments/${name}`
  if (kind === 'ClusterRole') return `/apis/rbac.authorization.k8s.io/v1/clusterroles/${name}`
  if (!isKind(kind)) throw new Error(`no path for ${kind}`)
  return resourcePath(kind, ns, name)
}

describe('the Helm chart on a real cluster', { skip, timeout: 600_000 }, () => {
  let cluster: Cluster
  let rest: RestClient
  let helmEnv: Record<string, string>

  const h = async (...args: string[]): Promise<HelmResult> => {
    const r = await runHelm(helm as string, args, helmEnv)
    assert.equal(r.code, 0, `helm ${args.join(' ')}: ${r.stderr}`)
    return r
  }
  const kubectl = async (...args: string[]) => {
    const r = await cluster.kubectl(...args)
    assert.equal(r.code, 0, `kubectl ${args.join(' ')}: ${r.stderr}`)
    return r.stdout
  }
  const get = async (kind: string, ns: string | undefined, name: string) => await rest.request('GET', pathOf(kind, ns, name))
  const exists = async (kind: string, ns: string | undefined, name: string) => {
    try { await get(kind, ns, name); return true } catch (e) { if ((e as { code?: number }).code === 404) return false; throw e }
  }
  const operatorPods = async () => ((await rest.request('GET', resourcePath('Pod', OP_NS), { query: { labelSelector: 'app.kubernetes.io/component=operator' } })).items as any[])
    .filter(p => p.metadata.deletionTimestamp === undefined)

  before(async () => {
    cluster = await startCluster({ gpuNodes: 1, gpusPerNode: 4, cpuNodes: 1 })
    rest = new RestClient(cluster.kc)
    const home = join(cluster.dir, 'helm')
    mkdirSync(home, { recursive: true })
    helmEnv = { KUBECONFIG: cluster.kubeconfigPath, HELM_CACHE_HOME: join(home, 'cache'), HELM_CONFIG_HOME: join(home, 'config'), HELM_DATA_HOME: join(home, 'data') }
    for (const ns of [OP_NS, NS]) await cluster.createNamespace(ns, { 'pod-security.kubernetes.io/enforce': 'restricted' })
  })

  after(async () => {
    await cluster?.stop()
  })

  test('helm install starts the operator under Pod Security restricted, with the CRD and the chart\'s RBAC', async () => {
    // crds.keep=false here and true in the upgrade: the CRD's annotation then shows that helm upgrade applies the CRD.
    const r = await h('install', RELEASE, CHART, '-n', OP_NS, '--set', 'progressIntervalSeconds=2', '--set', 'crds.keep=false', '--wait', '--timeout', '3m')
    assert.match(r.stdout, /STATUS: deployed/)
    assert.match(r.stdout, /kubectl get avs/, 'NOTES.txt tells the next step')
    const d = await waitFor('the operator Deployment to be available', async () => { const x = await get('Deployment', OP_NS, DEPLOYMENT); return x.status?.readyReplicas === 1 ? x : undefined }, 120_000)
    assert.equal(d.spec.replicas, 1)
    const [pod] = await operatorPods()
    assert.equal(pod.status.phase, 'Running')
    assert.match(pod.spec.nodeName, /^cpu-node-/)
    assert.equal(pod.spec.serviceAccountName, DEPLOYMENT)
    const crd = await get('CustomResourceDefinition', undefined, CRD)
    assert.equal(crd.metadata.annotations['meta.helm.sh/release-name'], RELEASE, 'the CRD is a release object, not an install-only crds/ file')
    assert.equal(crd.metadata.annotations['helm.sh/resource-policy'], undefined)
    const lease = await waitFor('the operator to take the Lease', async () => { const l = await get('Lease', OP_NS, 'averaging-swarm-operator'); return l.spec?.holderIdentity !== undefined ? l : undefined }, 60_000)
    assert.equal(lease.spec.holderIdentity, pod.metadata.name)
    const cm = await get('ConfigMap', OP_NS, `${DEPLOYMENT}-dashboard`)
    assert.equal(cm.metadata.labels.grafana_dashboard, '1')
  })

  test('the operator installed by the chart reconciles a swarm (its RBAC suffices)', async () => {
    const file = join(cluster.dir, 'swarm.json')
    writeFileSync(file, JSON.stringify(SWARM))
    // kubectl learns the new resource from discovery, which can lag the CRD's Established condition.
    await waitFor('kubectl apply of a swarm', async () => (await cluster.kubectl('apply', '-f', file)).code === 0, 60_000, 1000)
    for (const name of ['small-agent', 'small-bootstrap-0']) await waitFor(`StatefulSet ${name}`, async () => await exists('StatefulSet', NS, name), 60_000)
    for (const [kind, name] of [['Service', 'small-agents'], ['Secret', 'small-identity'], ['ConfigMap', 'small-config'], ['PodDisruptionBudget', 'small']]) assert.ok(await exists(kind, NS, name), `${kind} ${name}`)
    const st = await waitFor('status.replicas 3', async () => { const s = (await get('AveragingSwarm', NS, 'small')).status; return s?.replicas === 3 ? s : undefined }, 90_000)
    assert.equal(st.bootstrapPeers.length, 1)
    if (AGENT_BUILT) {
      const ready = await waitFor('3 Ready agents', async () => { const s = (await get('AveragingSwarm', NS, 'small')).status; return s?.readyReplicas === 3 ? s : undefined }, 180_000, 1000)
      assert.equal(ready.readyReplicas, 3)
    }
    assert.match(await kubectl('get', 'avs', '-n', NS), /small/)
  })

  test('helm upgrade to two replicas: both run, one holds the Lease, and the CRD is upgraded too', async () => {
    const r = await h('upgrade', RELEASE, CHART, '-n', OP_NS, '--reuse-values', '--set', 'replicas=2', '--set', 'crds.keep=true', '--wait', '--timeout', '3m')
    assert.match(r.stdout, /REVISION: 2/)
    await waitFor('two Ready operator replicas', async () => (await get('Deployment', OP_NS, DEPLOYMENT)).status?.readyReplicas === 2, 120_000)
    const pods = await operatorPods()
    assert.equal(pods.length, 2)
    const holder = (await get('Lease', OP_NS, 'averaging-swarm-operator')).spec.holderIdentity
    assert.ok(pods.some(p => p.metadata.name === holder), `the Lease holder ${holder} is one of the replicas`)
    const crd = await get('CustomResourceDefinition', undefined, CRD)
    assert.equal(crd.metadata.labels['app.kubernetes.io/managed-by'], 'Helm')
    assert.equal(crd.metadata.annotations['helm.sh/resource-policy'], 'keep', 'helm upgrade updated the CRD')
    const history = await h('history', RELEASE, '-n', OP_NS)
    assert.match(history.stdout, /2\s+.*deployed/)
  })

  test('helm uninstall removes the operator and its RBAC but keeps the CRD and the swarms', async () => {
    const r = await h('uninstall', RELEASE, '-n', OP_NS, '--wait', '--timeout', '2m')
    assert.match(r.stdout + r.stderr, /kept due to the resource policy|uninstalled/)
    await waitFor('the Deployment to go', async () => !await exists('Deployment', OP_NS, DEPLOYMENT), 60_000)
    assert.equal(await exists('ClusterRole', undefined, DEPLOYMENT), false)
    assert.equal(await exists('ClusterRole', undefined, `${DEPLOYMENT}-view`), false)
    assert.equal(await exists('CustomResourceDefinition', undefined, CRD), true)
    assert.equal(await exists('AveragingSwarm', NS, 'small'), true)
  })
})
