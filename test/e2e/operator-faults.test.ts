/**
 * Operator faults on the real test cluster, with the real operator process (under exactly
 * operator/rbac.ts's rules) and real agents run by the test kubelet:
 *  (a) the operator SIGKILLed while a spec change rolls the agents, a new one started;
 *  (b) kube-apiserver restarted under a running operator;
 *  (c) two replicas racing for a fresh Lease, the leader SIGKILLed right after a scale.
 * After each fault the swarm must converge to its spec with nothing duplicated or orphaned and
 * its identity keys unchanged. test/e2e/operator.test.ts already covers a graceful handover,
 * a crash of an idle leader and a restart between creates; these cases add faults mid-change.
 * Each case prints its recovery time as a test diagnostic (for RELIABILITY.md).
 */
import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { controlPlaneBuilt, startCluster, waitFor, type Cluster } from '../harness/index.js'
import { RestClient } from '../../operator/kube/rest.js'
import { resourcePath } from '../../operator/kube/resources.js'
import { startOperator as start, type OperatorProcess } from '../operator/e2e/operator-process.js'
import { onTeardown } from '../harness/cleanup.js'
import { OPERATOR_CLUSTER_RULES, OPERATOR_LEASE_RULES } from '../../operator/rbac.js'

const NS = 'faults'
const SWARM = 'roll'
const HASH = 'averaging.swarm.io/config-hash'
const skip = !controlPlaneBuilt() ? 'the control plane is not built: run npm run cluster:build'
  : !existsSync('dist/agent-bundle/main.js') ? 'the agent is not built' : false

type Kind = 'Pod' | 'StatefulSet' | 'Service' | 'Secret' | 'ConfigMap' | 'PodDisruptionBudget'
const OWNED: Kind[] = ['StatefulSet', 'Service', 'Secret', 'ConfigMap', 'PodDisruptionBudget']

/** The objects a swarm with `bootstrap` bootstrap agents owns, by kind. */
function expectedNames (bootstrap: number): Record<Exclude<Kind, 'Pod'>, string[]> {
  return {
    StatefulSet: [`${SWARM}-agent`, ...Array.from({ length: bootstrap }, (_, i) => `${SWARM}-bootstrap-${i}`)].sort(),
    Service: [`${SWARM}-agents`],
    Secret: [`${SWARM}-identity`],
    ConfigMap: [`${SWARM}-config`, `${SWARM}-members`],
    PodDisruptionBudget: [SWARM]
  }
}

const seconds = (ms: number) => (ms / 1000).toFixed(1)

/** startOperator, also killed by the harness's signal and exit handlers if the test is interrupted. */
async function startOperator (kubeconfig: string, logDir: string, name: string, args: string[]): Promise<OperatorProcess> {
  const p = await start(kubeconfig, logDir, name, args)
  const unregister = onTeardown(async () => { await p.kill('SIGKILL') }, () => { p.child.kill('SIGKILL') })
  p.child.once('exit', unregister)
  return p
}

describe('operator faults on a real cluster', { skip, timeout: 1_500_000 }, () => {
  let cluster: Cluster
  let rest: RestClient
  let kubeconfig: string
  let op: OperatorProcess | undefined
  const extra: OperatorProcess[] = []
  let identity: Record<string, string>
  let peers: string[]

  const kubectl = async (...args: string[]) => {
    const r = await cluster.kubectl(...args)
    assert.equal(r.code, 0, `kubectl ${args.join(' ')}: ${r.stderr}`)
    return r.stdout
  }
  const swarm = async () => await rest.request('GET', resourcePath('AveragingSwarm', NS, SWARM))
  const listAll = async (kind: Kind) => (await rest.request('GET', resourcePath(kind, NS))).items as any[]
  const live = (objs: any[]) => objs.filter(o => o.metadata.deletionTimestamp === undefined)
  const patch = async (spec: object) => await kubectl('patch', '-n', NS, `avs/${SWARM}`, '--type=merge', '-p', JSON.stringify({ spec }))

  /** A ServiceAccount bound to exactly operator/rbac.ts's rules, and a kubeconfig with its token. */
  async function operatorKubeconfig (): Promise<string> {
    const apply = async (obj: object, i: number) => { const f = join(cluster.dir, `rbac-${i}.json`); writeFileSync(f, JSON.stringify(obj)); await kubectl('apply', '-f', f) }
    const subjects = [{ kind: 'ServiceAccount', name: 'avs-operator', namespace: 'default' }]
    await apply({ apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'avs-operator', namespace: 'default' } }, 0)
    await apply({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: 'avs-operator' }, rules: OPERATOR_CLUSTER_RULES }, 1)
    await apply({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', metadata: { name: 'avs-operator' }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'avs-operator' }, subjects }, 2)
    await apply({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: { name: 'avs-operator-leases', namespace: 'default' }, rules: OPERATOR_LEASE_RULES }, 3)
    await apply({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', metadata: { name: 'avs-operator-leases', namespace: 'default' }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'avs-operator-leases' }, subjects }, 4)
    const token = (await kubectl('create', 'token', 'avs-operator', '-n', 'default', '--duration=1h')).trim()
    const c = cluster.kc.getCurrentCluster()!
    const path = join(cluster.dir, 'operator.kubeconfig')
    writeFileSync(path, JSON.stringify({
      apiVersion: 'v1', kind: 'Config', 'current-context': 'op',
      clusters: [{ name: 'c', cluster: { server: c.server, 'certificate-authority-data': c.caData } }],
      users: [{ name: 'op', user: { token } }],
      contexts: [{ name: 'op', context: { cluster: 'c', user: 'op' } }]
    }))
    return path
  }

  /**
   * Problems with the swarm's objects, [] when none: every object in the namespace that carries
   * the swarm's label or name is one of the expected names, exactly once, controlled by the live
   * swarm; every live pod belongs to a current StatefulSet, and there are `replicas` of them.
   */
  async function inventoryProblems (replicas: number, bootstrap: number): Promise<string[]> {
    const s = await swarm()
    const problems: string[] = []
    const mine = (o: any) => o.metadata.labels?.['averaging.swarm.io/swarm'] === SWARM || o.metadata.name === SWARM || o.metadata.name.startsWith(`${SWARM}-`)
    const want = expectedNames(bootstrap)
    const sets = new Map<string, string>()
    for (const kind of OWNED) {
      const objs = live(await listAll(kind)).filter(mine)
      const got = objs.map(o => o.metadata.name).sort()
      if (JSON.stringify(got) !== JSON.stringify(want[kind as keyof typeof want])) problems.push(`${kind}: ${got.join(',')} (want ${want[kind as keyof typeof want].join(',')})`)
      for (const o of objs) {
        const refs = (o.metadata.ownerReferences ?? []).filter((r: any) => r.controller === true)
        if (refs.length !== 1 || refs[0].uid !== s.metadata.uid) problems.push(`${kind} ${o.metadata.name} is not controlled by the swarm (${JSON.stringify(o.metadata.ownerReferences)})`)
        if (kind === 'StatefulSet') sets.set(o.metadata.uid, o.metadata.name)
      }
    }
    const pods = live(await listAll('Pod')).filter(mine)
    if (pods.length !== replicas) problems.push(`${pods.length} live pods, want ${replicas}`)
    for (const p of pods) {
      const ref = (p.metadata.ownerReferences ?? []).find((r: any) => r.controller === true)
      if (ref === undefined || !sets.has(ref.uid)) problems.push(`pod ${p.metadata.name} is owned by no current StatefulSet`)
    }
    const names = pods.map(p => p.metadata.name)
    if (new Set(names).size !== names.length) problems.push(`duplicate pods ${names.join(',')}`)
    return problems
  }

  /** The swarm has converged: every set rolled to one config hash, every pod updated and Ready, status says so. */
  async function converged (replicas: number, hashNot?: string): Promise<boolean> {
    const s = await swarm()
    const sets = live(await listAll('StatefulSet')).filter(x => x.metadata.labels?.['averaging.swarm.io/swarm'] === SWARM)
    const hashes = new Set(sets.map(x => x.spec.template.metadata.annotations[HASH]))
    if (hashes.size !== 1 || (hashNot !== undefined && hashes.has(hashNot))) return false
    for (const x of sets) {
      const st = x.status ?? {}
      if (st.observedGeneration !== x.metadata.generation || st.updateRevision !== st.currentRevision) return false
      if ((st.readyReplicas ?? 0) !== x.spec.replicas || (st.updatedReplicas ?? 0) !== x.spec.replicas) return false
    }
    const pods = live(await listAll('Pod')).filter(p => p.metadata.labels?.['averaging.swarm.io/swarm'] === SWARM)
    const revisions = new Map(sets.map(x => [x.metadata.name, x.status.updateRevision]))
    for (const p of pods) {
      const set = p.metadata.ownerReferences?.[0]?.name
      if (p.metadata.labels['controller-revision-hash'] !== revisions.get(set)) return false
      if (!(p.status?.conditions ?? []).some((c: any) => c.type === 'Ready' && c.status === 'True')) return false
    }
    const st = s.status ?? {}
    return pods.length === replicas && st.observedGeneration === s.metadata.generation && st.phase === 'Ready' &&
      st.replicas === replicas && st.readyReplicas === replicas
  }

  /**
   * Applies of objects that never change in this suite (Service, identity Secret), by any operator
   * so far, from their debug logs: a replacement that starts with existing objects must see them
   * as up to date (it once re-applied every object on every reconcile: list items lack kind).
   */
  const needlessWrites = () => readdirSync(cluster.logDir).filter(f => /^op-.*\.log$/.test(f))
    .flatMap(f => readFileSync(join(cluster.logDir, f), 'utf8').split('\n').filter(l => l.includes('"msg":"updated"') && (l.includes(`"name":"${SWARM}-agents"`) || l.includes(`"name":"${SWARM}-identity"`))).map(l => `${f}: ${l.slice(0, 160)}`))

  const identityUnchanged = async () => {
    const secret = await rest.request('GET', resourcePath('Secret', NS, `${SWARM}-identity`))
    assert.deepEqual(secret.data, identity, 'the identity keys are the ones generated at creation')
    assert.deepEqual((await swarm()).status.bootstrapPeers, peers, 'the bootstrap peer ids are unchanged')
  }

  before(async () => {
    cluster = await startCluster({ gpuNodes: 2, gpusPerNode: 4, cpuNodes: 0 })
    rest = new RestClient(cluster.kc)
    await cluster.createNamespace(NS, { 'pod-security.kubernetes.io/enforce': 'restricted' })
    await kubectl('apply', '--server-side', '-f', 'crds/averagingswarm.yaml')
    await waitFor('the CRD to be Established', async () => ((await rest.request('GET', resourcePath('CustomResourceDefinition', undefined, 'averagingswarms.averaging.swarm.io'))).status?.conditions ?? [])
      .some((c: { type: string, status: string }) => c.type === 'Established' && c.status === 'True'), 60_000)
    kubeconfig = await operatorKubeconfig()
    op = await startOperator(kubeconfig, cluster.logDir, 'op-a', ['--lease-name', 'faults'])
    await waitFor('op-a ready', async () => await op!.ready(), 60_000)
    await rest.request('POST', resourcePath('AveragingSwarm', NS), {
      body: {
        apiVersion: 'averaging.swarm.io/v1alpha1', kind: 'AveragingSwarm', metadata: { name: SWARM, namespace: NS },
        spec: {
          replicas: 4,
          bootstrap: { replicas: 2 },
          resources: { limits: { 'nvidia.com/gpu': 1 } },
          tolerations: [{ key: 'nvidia.com/gpu', operator: 'Exists', effect: 'NoSchedule' }],
          averaging: { targetGroupSize: 4, minGroupSize: 2, period: '5s' },
          workload: { type: 'builtin' }
        }
      }
    })
    await waitFor('the swarm Ready with 4 agents', async () => await converged(4), 300_000, 1000)
    identity = (await rest.request('GET', resourcePath('Secret', NS, `${SWARM}-identity`))).data
    peers = (await swarm()).status.bootstrapPeers
    assert.equal(peers.length, 2)
  })

  after(async () => {
    for (const p of [op, ...extra]) await p?.kill('SIGKILL')
    await cluster?.stop()
  })

  test('(a) operator SIGKILLed twice during a rolling update (mid-reconcile, then mid-roll): replacements finish it, nothing duplicated or orphaned, keys kept', async (t) => {
    const sets = async () => live(await listAll('StatefulSet')).filter(x => x.metadata.labels?.['averaging.swarm.io/swarm'] === SWARM)
    const pods = async () => live(await listAll('Pod')).filter(p => p.metadata.labels?.['averaging.swarm.io/swarm'] === SWARM)
    const [oldHash] = (await sets()).map(x => x.spec.template.metadata.annotations[HASH])
    const target = async () => (await listAll('ConfigMap')).find(c => c.metadata.name === `${SWARM}-config`)?.data.AVS_TARGET_GROUP_SIZE
    await patch({ averaging: { targetGroupSize: 3 } })
    // First kill at the first sign of the change: the ConfigMap written, StatefulSets maybe not yet.
    await waitFor('the reconcile of the change to start', async () => await target() === '3' || (await sets()).some(x => x.spec.template.metadata.annotations[HASH] !== oldHash), 30_000, 20)
    const killed = Date.now()
    await op!.kill('SIGKILL')
    const templates = (await sets()).filter(x => x.spec.template.metadata.annotations[HASH] !== oldHash).length
    t.diagnostic(`kill 1 (mid-reconcile): ConfigMap target ${await target()}, ${templates}/3 StatefulSet templates updated`)
    // A replacement, as its Deployment would start it: it waits out the dead leader's Lease.
    op = await startOperator(kubeconfig, cluster.logDir, 'op-a2', ['--lease-name', 'faults'])
    // Second kill once the replacement leads and the pods roll: some run the new template, some the old.
    await waitFor('op-a2 to lead', async () => (await op!.metric('leader_election_master_status')) === 1, 120_000, 200)
    const mid = await waitFor('the pods to be mid-roll', async () => {
      const ps = await pods()
      const updated = ps.filter(p => p.metadata.annotations?.[HASH] !== oldHash).length
      // On an idle machine the roll can finish between two polls: the kill then lands just after it.
      return updated > 0 ? `${updated}/4 pods on the new template (${ps.length} live)` : undefined
    }, 120_000, 100)
    const killed2 = Date.now()
    await op.kill('SIGKILL')
    t.diagnostic(`kill 2 (mid-roll, op-a2 leading) ${seconds(killed2 - killed)} s after kill 1: ${mid}`)
    op = await startOperator(kubeconfig, cluster.logDir, 'op-b', ['--lease-name', 'faults'])
    await waitFor('the swarm to converge to targetGroupSize 3', async () => await converged(4, oldHash), 300_000, 500)
    const done = Date.now()
    t.diagnostic(`converged ${seconds(done - killed2)} s after kill 2 (${seconds(done - killed)} s after kill 1; each replacement waits out the 15 s Lease)`)
    // The StatefulSet controller may finish the roll before op-b has waited out the dead leader's
    // Lease (seen on an idle machine): leadership is asserted once it can have been taken.
    await waitFor('op-b to lead', async () => (await op!.metric('leader_election_master_status')) === 1, 60_000, 200)
    assert.equal(await target(), '3')
    assert.deepEqual(await inventoryProblems(4, 2), [])
    await identityUnchanged()
    assert.deepEqual(needlessWrites(), [], 'no operator re-applies unchanged objects')
  })

  test('(b1) kube-apiserver down longer than the renew deadline: the leader exits 1 at the deadline, as client-go leaders do', async (t) => {
    await waitFor('op-b to settle', async () => await converged(4), 60_000, 500)
    await waitFor('op-b to lead', async () => (await op!.metric('leader_election_master_status')) === 1, 60_000, 200)
    const leader = op!
    const exit = new Promise<number | null>(resolve => leader.child.once('exit', code => resolve(code)))
    // SIGKILL: a crash, no graceful drain (a SIGTERM'd kube-apiserver drains its watches for 30+ s here).
    const restart = await cluster.restartApiserver({ signal: 'SIGKILL', downMs: 14_000 })
    t.diagnostic(`kube-apiserver down ${seconds(restart.unavailableMs)} s`)
    assert.equal(await Promise.race([exit, new Promise(resolve => setTimeout(() => resolve('still running'), 5000))]), 1, 'the deposed leader exits 1 (its Deployment restarts it)')
    assert.match(readFileSync(leader.logFile, 'utf8'), /lost the leader lease/)
    // Its replacement runs without leader election for (b2), which tests the watches themselves.
    op = await startOperator(kubeconfig, cluster.logDir, 'op-r', ['--no-leader-elect'])
    const started = Date.now()
    await waitFor('op-r ready', async () => await op!.ready(), 120_000)
    await waitFor('the swarm to stay converged under op-r', async () => await converged(4), 300_000, 500)
    t.diagnostic(`replacement ready and status right ${seconds(Date.now() - started)} s after its start`)
    assert.deepEqual(await inventoryProblems(4, 2), [])
  })

  test('(b2) kube-apiserver crashed and restarted under a running operator: its watches reconnect, a later change is reconciled, status right', async (t) => {
    const restartsBefore = (readFileSync(op!.logFile, 'utf8').match(/watch failed; restarting/g) ?? []).length
    const restart = await cluster.restartApiserver({ signal: 'SIGKILL' })
    const back = Date.now()
    t.diagnostic(`kube-apiserver down ${seconds(restart.unavailableMs)} s`)
    await patch({ replicas: 5 })
    await waitFor('5 Ready agents after the restart', async () => await converged(5), 300_000, 500)
    t.diagnostic(`scale 4 -> 5 converged (5 Ready, status right) ${seconds(Date.now() - back)} s after the API came back`)
    assert.equal(op!.child.exitCode, null, 'the operator kept running')
    assert.ok((readFileSync(op!.logFile, 'utf8').match(/watch failed; restarting/g) ?? []).length > restartsBefore, 'the outage broke its watches, which it restarted')
    const s = await swarm()
    assert.equal(s.status.observedGeneration, s.metadata.generation)
    assert.equal(s.status.replicas, 5)
    // Only watches fill the caches (the 300 s resync only requeues): a Ready 5th pod in status means the Pod, StatefulSet and swarm watches all came back.
    assert.deepEqual(await inventoryProblems(5, 2), [])
    await identityUnchanged()
    assert.deepEqual(needlessWrites(), [], 'no operator re-applies unchanged objects')
  })

  test('(c) two replicas race for a fresh Lease; the leader SIGKILLed right after a scale; the other takes over within the lease duration and reconciles it', async (t) => {
    await op!.kill('SIGTERM')
    const lease = 'faults-race'
    const flags = ['--lease-name', lease]
    const [c, d] = await Promise.all([startOperator(kubeconfig, cluster.logDir, 'op-c', flags), startOperator(kubeconfig, cluster.logDir, 'op-d', flags)])
    extra.push(c, d)
    await waitFor('one of op-c/op-d to lead', async () => ((await c.metric('leader_election_master_status')) ?? 0) + ((await d.metric('leader_election_master_status')) ?? 0) >= 1, 180_000, 200)
    await new Promise(resolve => setTimeout(resolve, 4000)) // two retry periods: a second leader would show by now
    const leads = [await c.metric('leader_election_master_status'), await d.metric('leader_election_master_status')]
    assert.deepEqual(leads.slice().sort(), [0, 1], `exactly one leads (op-c ${leads[0]}, op-d ${leads[1]})`)
    const [leader, standby] = leads[0] === 1 ? [c, d] : [d, c]
    const holder = (await rest.request('GET', resourcePath('Lease', 'default', lease))).spec.holderIdentity
    assert.equal(holder, leader === c ? 'op-c' : 'op-d')
    assert.equal((await standby.metric('averagingswarm_operator_writes_total')) ?? 0, 0, 'the standby writes nothing')
    assert.equal((await standby.metric('controller_runtime_reconcile_total')) ?? 0, 0, 'the standby reconciles nothing')
    // A scale (no roll, cheap on a loaded machine) that the leader may or may not have begun.
    await patch({ replicas: 4 })
    await leader.kill('SIGKILL')
    const killed = Date.now()
    await waitFor('the standby to lead', async () => (await standby.metric('leader_election_master_status')) === 1, 60_000, 200)
    const takeover = Date.now() - killed
    await waitFor('the swarm to converge to 4 agents', async () => await converged(4), 300_000, 500)
    const recovered = Date.now() - killed
    t.diagnostic(`takeover ${seconds(takeover)} s after the SIGKILL (lease 15 s, retry 2 s); converged ${seconds(recovered)} s after it`)
    assert.ok(takeover <= 15_000 + 2 * 2000 + 3000, `the standby takes over within the lease duration plus two retry periods (took ${takeover} ms)`)
    assert.equal((await rest.request('GET', resourcePath('Lease', 'default', lease))).spec.holderIdentity, standby === c ? 'op-c' : 'op-d')
    assert.equal(live(await listAll('StatefulSet')).find(x => x.metadata.name === `${SWARM}-agent`).spec.replicas, 2)
    assert.deepEqual(await inventoryProblems(4, 2), [])
    await identityUnchanged()
    assert.deepEqual(needlessWrites(), [], 'no operator re-applies unchanged objects')
    op = standby
  })
})
