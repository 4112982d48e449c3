/**
 * Least privilege on the real test cluster. The chart is installed by the real helm with
 * watchNamespace=ml, so the operator (a pod the test kubelet runs) works under exactly the chart's
 * RBAC; it then runs a private swarm (generated PSK, two bootstrap identities) in "ml", which
 * enforces Pod Security "restricted". The test proves:
 *  - the operator's ServiceAccount is denied (403) what it must not touch: Secrets in other
 *    namespaces and cluster-wide, nodes, RBAC objects, tokens, pods, swarm specs;
 *  - the agent pods are admitted under "restricted" and run, with the fields it demands;
 *  - no identity key or PSK, in any encoding, appears in the operator's or agents' logs, the
 *    Events, the swarm object or the operator's and agents' /metrics.
 */
import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, mkdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { controlPlaneBuilt, startCluster, waitFor, type Cluster } from '../harness/index.js'
import { RestClient } from '../../operator/kube/rest.js'
import { resourcePath } from '../../operator/kube/resources.js'
import { CHART, helmBinary, runHelm } from '../charts/helm.js'
import { OPERATOR_CLUSTER_SCOPED_RULES, OPERATOR_WATCH_NAMESPACE_RULES } from '../../operator/rbac.js'

const OP_NS = 'avs-system'
const NS = 'ml'
const OTHER = 'other'
const RELEASE = 'avs'
const SA = 'avs-averaging-swarm'
const AS = `--as=system:serviceaccount:${OP_NS}:${SA}`
const SWARM = 'private'
const REPLICAS = 3
const helm = helmBinary()
const skip = !controlPlaneBuilt() ? 'the control plane is not built: run npm run cluster:build'
  : helm === undefined ? 'the helm layer package is not installed: run npm ci'
    : !existsSync('dist/agent-bundle/main.js') || !existsSync('dist/operator/main.js') ? 'the operator or the agent is not built' : false

/** Every encoding in which a secret value could leak: as stored, decoded, hex, base64, base64url, and the raw key and seed. */
function needlesOfIdentity (stored: string): string[] {
  const agentValue = Buffer.from(stored, 'base64').toString('utf8') // AVS_IDENTITY_KEY: base64 protobuf
  const protobuf = Buffer.from(agentValue, 'base64')
  const raw = protobuf.subarray(4) // protobuf header (type, length) then the 64-byte Ed25519 key: seed ‖ public key
  const seed = raw.subarray(0, 32)
  return [stored, agentValue, ...[protobuf, raw, seed].flatMap(b => [b.toString('hex'), b.toString('base64'), b.toString('base64url')])]
}

function needlesOfPsk (stored: string): string[] {
  const text = Buffer.from(stored, 'base64').toString('utf8')
  const hex = text.trim().split('\n').at(-1) as string
  return [stored, text.trim(), hex, Buffer.from(hex, 'hex').toString('base64'), Buffer.from(hex, 'hex').toString('base64url')]
}

/** Which needles occur in which sources; hex is matched case-insensitively, JSON-escaped slashes undone. */
function leaks (sources: Record<string, string>, needles: Record<string, string[]>): string[] {
  const found: string[] = []
  for (const [where, text] of Object.entries(sources)) {
    const t = text.replaceAll('\\/', '/')
    const lower = t.toLowerCase()
    for (const [what, forms] of Object.entries(needles)) {
      for (const f of forms) if (t.includes(f) || (/^[0-9a-f]+$/.test(f) && lower.includes(f))) found.push(`${what} (${f.slice(0, 8)}…) in ${where}`)
    }
  }
  return found
}

describe('least privilege on a real cluster', { skip, timeout: 600_000 }, () => {
  let cluster: Cluster
  let rest: RestClient
  let helmEnv: Record<string, string>

  const kubectl = async (...args: string[]) => await cluster.kubectl(...args)
  const ok = async (...args: string[]) => { const r = await kubectl(...args); assert.equal(r.code, 0, `kubectl ${args.join(' ')}: ${r.stderr}`); return r.stdout }
  const live = async (ns: string, selector: string) => ((await rest.request('GET', resourcePath('Pod', ns), { query: { labelSelector: selector } })).items as any[])
    .filter(p => p.metadata.deletionTimestamp === undefined)
  const agents = async () => await live(NS, `averaging.swarm.io/swarm=${SWARM}`)
  const operatorPod = async () => (await live(OP_NS, 'app.kubernetes.io/component=operator'))[0]

  before(async () => {
    cluster = await startCluster({ gpuNodes: 1, gpusPerNode: 4, cpuNodes: 1 })
    rest = new RestClient(cluster.kc)
    const home = join(cluster.dir, 'helm')
    mkdirSync(home, { recursive: true })
    helmEnv = { KUBECONFIG: cluster.kubeconfigPath, HELM_CACHE_HOME: join(home, 'cache'), HELM_CONFIG_HOME: join(home, 'config'), HELM_DATA_HOME: join(home, 'data') }
    for (const ns of [OP_NS, NS]) await cluster.createNamespace(ns, { 'pod-security.kubernetes.io/enforce': 'restricted' })
    await cluster.createNamespace(OTHER)
    await rest.request('POST', resourcePath('Secret', OTHER), { body: { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'not-yours' }, stringData: { token: 'someone-elses' } } })
    const r = await runHelm(helm as string, ['install', RELEASE, CHART, '-n', OP_NS, '--set', `watchNamespace=${NS}`, '--set', 'logLevel=debug',
      '--set', 'progressIntervalSeconds=2', '--set', 'crds.keep=false', '--wait', '--timeout', '3m'], helmEnv)
    assert.equal(r.code, 0, `helm install: ${r.stderr}`)
    await waitFor('kubectl to know the swarm resource', async () => (await kubectl('get', 'avs', '-n', NS)).code === 0, 60_000, 1000)
    await rest.request('POST', resourcePath('AveragingSwarm', NS), {
      body: {
        apiVersion: 'averaging.swarm.io/v1alpha1', kind: 'AveragingSwarm', metadata: { name: SWARM, namespace: NS },
        spec: {
          replicas: REPLICAS,
          bootstrap: { replicas: 2 },
          resources: { limits: { 'nvidia.com/gpu': 1 } },
          tolerations: [{ key: 'nvidia.com/gpu', operator: 'Exists', effect: 'NoSchedule' }],
          averaging: { targetGroupSize: 3, minGroupSize: 2, period: '5s' },
          network: { privateNetworkSecret: { name: `${SWARM}-psk`, generate: true } },
          logLevel: 'debug',
          workload: { type: 'builtin' }
        }
      }
    })
    await waitFor(`${REPLICAS} Ready agents with averaging rounds`, async () => {
      const st = (await rest.request('GET', resourcePath('AveragingSwarm', NS, SWARM))).status
      return st?.readyReplicas === REPLICAS && st.roundsCompleted > 0
    }, 200_000, 1000)
  })

  after(async () => {
    await cluster?.stop()
  })

  test('the operator runs under exactly the chart\'s RBAC, scoped to its watch namespace', async () => {
    const pod = await operatorPod()
    assert.equal(pod.spec.serviceAccountName, SA)
    assert.equal(pod.status.phase, 'Running')
    const cr = await rest.request('GET', `/apis/rbac.authorization.k8s.io/v1/clusterroles/${SA}`)
    assert.deepEqual(cr.rules, OPERATOR_CLUSTER_SCOPED_RULES, 'cluster-wide only the PodMonitor CRD lookup')
    const role = await rest.request('GET', `/apis/rbac.authorization.k8s.io/v1/namespaces/${NS}/roles/${SA}`)
    assert.deepEqual(role.rules, OPERATOR_WATCH_NAMESPACE_RULES)
    const bindings = (await rest.request('GET', '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings')).items as any[]
    const mine = bindings.filter(b => (b.subjects ?? []).some((s: any) => s.kind === 'ServiceAccount' && s.name === SA))
    assert.deepEqual(mine.map(b => b.roleRef.name), [SA], 'no other ClusterRole is bound to the operator')
  })

  test('the operator\'s ServiceAccount is denied (403) what it must not touch, and allowed what it needs', async () => {
    const denied: Array<[string, string[]]> = [
      ['read a Secret in a namespace without swarms', ['get', 'secret', 'not-yours', '-n', OTHER]],
      ['list Secrets in a namespace without swarms', ['get', 'secrets', '-n', OTHER]],
      ['list Secrets cluster-wide', ['get', 'secrets', '--all-namespaces']],
      ['list Secrets in kube-system', ['get', 'secrets', '-n', 'kube-system']],
      ['list pods in a namespace without swarms', ['get', 'pods', '-n', OTHER]],
      ['delete a node', ['delete', 'node', cluster.nodeNames[0], '--dry-run=server']],
      ['create a ClusterRole', ['create', 'clusterrole', 'escalate', '--verb=*', '--resource=*', '--dry-run=server']],
      ['bind itself to cluster-admin', ['create', 'clusterrolebinding', 'escalate', '--clusterrole=cluster-admin', `--serviceaccount=${OP_NS}:${SA}`, '--dry-run=server']],
      ['create a RoleBinding in its own namespace', ['create', 'rolebinding', 'escalate', '-n', NS, '--clusterrole=admin', `--serviceaccount=${OP_NS}:${SA}`, '--dry-run=server']],
      ['mint a ServiceAccount token', ['create', 'token', 'default', '-n', NS]],
      ['create a pod itself', ['run', 'sneaky', '-n', NS, '--image=busybox', '--restart=Never', '--dry-run=server']],
      ['change a swarm\'s spec', ['patch', 'avs', SWARM, '-n', NS, '--type=merge', '-p', '{"spec":{"replicas":9}}', '--dry-run=server']],
      ['create a Secret in a namespace without swarms', ['create', 'secret', 'generic', 'x', '-n', OTHER, '--from-literal=a=b', '--dry-run=server']],
      // Checkpoint claims are the user's result: the operator may create one from a template, never change or delete one.
      ['delete a PersistentVolumeClaim', ['delete', 'pvc', 'results', '-n', NS, '--dry-run=server']],
      ['list PersistentVolumeClaims in a namespace without swarms', ['get', 'pvc', '-n', OTHER]]
    ]
    const wrong: string[] = []
    for (const [what, args] of denied) {
      const r = await kubectl(...args, AS)
      if (r.code === 0 || !/forbidden/i.test(r.stderr)) wrong.push(`${what}: exit ${r.code} ${r.stderr.trim().split('\n')[0] ?? ''}`)
    }
    assert.deepEqual(wrong, [], 'every one of these is refused by RBAC')
    // Controls: impersonation works, and what the operator needs is allowed.
    await ok('get', 'secrets', '-n', NS, AS)
    await ok('get', 'statefulsets', '-n', NS, AS)
    await ok('get', 'pvc', '-n', NS, AS)
    await ok('get', 'avs', '-n', NS, AS)
    // Exposed swarms announce their Nodes' addresses (cluster-scoped, read only).
    await ok('get', 'nodes', AS)
    // ttlSecondsAfterFinished: a finished swarm is deleted by the operator, as a Job's TTL does.
    await ok('delete', 'avs', SWARM, '-n', NS, '--dry-run=server', AS)
    await ok('get', 'lease', 'averaging-swarm-operator', '-n', OP_NS, AS)
    assert.match((await kubectl('auth', 'can-i', 'get', 'secrets', '-n', OTHER, AS)).stdout, /^no/)
    // A checkpoint claim: created from a template, never changed (kubectl patch would GET first and say NotFound).
    assert.match((await kubectl('auth', 'can-i', 'create', 'persistentvolumeclaims', '-n', NS, AS)).stdout, /^yes/)
    for (const verb of ['patch', 'update', 'delete']) assert.match((await kubectl('auth', 'can-i', verb, 'persistentvolumeclaims', '-n', NS, AS)).stdout, /^no/, verb)
  })

  test('agent pods are admitted under Pod Security restricted and run with its fields', async () => {
    const ns = await rest.request('GET', `/api/v1/namespaces/${NS}`)
    assert.equal(ns.metadata.labels['pod-security.kubernetes.io/enforce'], 'restricted')
    // Control: the namespace really enforces it.
    const bad = await kubectl('run', 'rooted', '-n', NS, '--image=busybox', '--restart=Never', '--dry-run=server')
    assert.notEqual(bad.code, 0)
    assert.match(bad.stderr, /violates PodSecurity "restricted/)
    const pods = await agents()
    assert.equal(pods.length, REPLICAS)
    for (const p of pods) {
      const where = `pod ${p.metadata.name}`
      assert.equal(p.status.phase, 'Running', where)
      assert.equal(p.spec.securityContext.runAsNonRoot, true, where)
      assert.ok(p.spec.securityContext.runAsUser > 0, where)
      assert.deepEqual(p.spec.securityContext.seccompProfile, { type: 'RuntimeDefault' }, where)
      assert.equal(p.spec.automountServiceAccountToken, false, `${where}: agents get no API token`)
      for (const v of p.spec.volumes ?? []) assert.equal(v.hostPath, undefined, `${where}: no hostPath`)
      for (const c of [...(p.spec.initContainers ?? []), ...p.spec.containers]) {
        const sc = c.securityContext
        assert.equal(sc.allowPrivilegeEscalation, false, `${where}/${c.name}`)
        assert.equal(sc.readOnlyRootFilesystem, true, `${where}/${c.name}`)
        assert.equal(sc.runAsNonRoot, true, `${where}/${c.name}`)
        assert.deepEqual(sc.capabilities, { drop: ['ALL'] }, `${where}/${c.name}`)
        assert.notEqual(sc.privileged, true, `${where}/${c.name}`)
      }
    }
    const op = await operatorPod()
    assert.equal(op.status.phase, 'Running', 'the operator itself runs under restricted too')
  })

  test('no identity key or PSK appears in logs, Events, the swarm object or /metrics', async (t) => {
    const identity = (await rest.request('GET', resourcePath('Secret', NS, `${SWARM}-identity`))).data as Record<string, string>
    const psk = (await rest.request('GET', resourcePath('Secret', NS, `${SWARM}-psk`))).data as Record<string, string>
    assert.equal(Object.keys(identity).length, 2)
    const needles: Record<string, string[]> = {}
    for (const [k, v] of Object.entries(identity)) needles[`identity ${k}`] = needlesOfIdentity(v)
    needles.psk = needlesOfPsk(Object.values(psk)[0])
    // Control: each needle set finds its secret where it belongs, in the Secret objects.
    for (const [what, forms] of Object.entries(needles)) assert.ok(leaks({ 'the Secrets': JSON.stringify({ identity, psk }) }, { [what]: forms }).length >= 1, what)

    // Let a few more rounds and status writes happen so that every path has produced output.
    await new Promise(resolve => setTimeout(resolve, 5000))
    const sources: Record<string, string> = {}
    const op = await operatorPod()
    sources['operator log'] = readFileSync(cluster.containerLogFile(OP_NS, op.metadata.name, 'operator') as string, 'utf8')
    sources['operator /metrics'] = await (await fetch(`http://${op.status.podIP}:8080/metrics`)).text()
    for (const p of await agents()) {
      sources[`${p.metadata.name} log`] = readFileSync(cluster.containerLogFile(NS, p.metadata.name, 'agent') as string, 'utf8')
      sources[`${p.metadata.name} /metrics`] = await (await fetch(`http://${p.status.podIP}:9400/metrics`)).text()
    }
    sources['kubectl logs of the operator'] = await ok('logs', '-n', OP_NS, op.metadata.name)
    sources.Events = JSON.stringify((await rest.request('GET', '/api/v1/events')).items) + JSON.stringify((await rest.request('GET', '/apis/events.k8s.io/v1/events')).items)
    sources['the swarm (spec and status)'] = JSON.stringify(await rest.request('GET', resourcePath('AveragingSwarm', NS, SWARM)))
    sources['kubectl describe avs'] = await ok('describe', 'avs', SWARM, '-n', NS)
    // The corpus is real: logs and metrics of every agent, events of the swarm.
    assert.ok(sources['operator log'].split('\n').length > 20)
    assert.match(sources['operator /metrics'], /averagingswarm_agents_ready/)
    for (const p of await agents()) assert.match(sources[`${p.metadata.name} /metrics`], /averaging_rounds_total/)
    assert.match(sources.Events, /"reason":"Created"/)
    const bytes = Object.values(sources).reduce((n, s) => n + s.length, 0)
    t.diagnostic(`searched ${Object.keys(sources).length} sources, ${(bytes / 1024).toFixed(0)} KiB, for ${Object.values(needles).flat().length} encodings of 2 identity keys and the PSK`)
    assert.deepEqual(leaks(sources, needles), [])
  })
})
