/**
 * The operator end to end on the real test cluster (kube-apiserver, controller-manager,
 * scheduler from their Go modules; the harness kubelet runs pods as local processes): CRD
 * validation, reconcile of examples/demo.yaml, scale, spec-change roll, suspend, steady state,
 * deletion, restart and leader election. Without dist/agent/main.js (the agent) the pods cannot
 * run; the test then proves objects, scheduling and an honest Degraded status instead of Ready.
 */
import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync } from 'node:fs'
import { controlPlaneBuilt, startCluster, waitFor, type Cluster } from '../harness/index.js'
import { RestClient, ApiError } from '../../operator/kube/rest.js'
import { resourcePath } from '../../operator/kube/resources.js'
import { MALFORMED, malformedSwarm } from '../operator/malformed/cases.js'
import { OUTSIDE, randomAveraging, reseed, swarmObject } from '../operator/api/averaging-samples.js'
import { AVERAGING_KEYS } from '../../api/averaging-parameters.js'
import { validateSwarm } from '../../api/v1alpha1/validate.js'
import { base58 } from '../../api/v1alpha1/address-patterns.js'
import { withDefaults } from '../../api/v1alpha1/defaults.js'
import { startOperator, type OperatorProcess } from '../operator/e2e/operator-process.js'
import { peerIdOf } from '../../operator/builders/identity.js'
import { AGENT_CONTAINER } from '../../operator/builders/pod-template.js'
import { operatorKubeconfig } from './operator-identity.js'

const NS = 'ml'
const AGENT_BUILT = existsSync('dist/agent-bundle/main.js')
const skip = controlPlaneBuilt() ? false : 'the control plane is not built: run npm run cluster:build'

describe('operator on a real cluster', { skip, timeout: 600_000 }, () => {
  let cluster: Cluster
  let rest: RestClient
  let op: OperatorProcess
  /** A kubeconfig with a ServiceAccount token bound to operator/rbac.ts's rules only. */
  let kubeconfig: string

  const swarm = async (name: string) => await rest.request('GET', resourcePath('AveragingSwarm', NS, name))
  const list = async (kind: 'Pod' | 'StatefulSet' | 'Service' | 'Secret' | 'ConfigMap' | 'PodDisruptionBudget', swarmName: string) =>
    (await rest.request('GET', resourcePath(kind, NS), { query: { labelSelector: `averaging.swarm.io/swarm=${swarmName}` } })).items as any[]
  const kubectl = async (...args: string[]) => {
    const r = await cluster.kubectl(...args)
    assert.equal(r.code, 0, `kubectl ${args.join(' ')}: ${r.stderr}`)
    return r.stdout
  }
  const livePods = async (name: string) => (await list('Pod', name)).filter(p => p.metadata.deletionTimestamp === undefined)

  before(async () => {
    cluster = await startCluster({ gpuNodes: 4, gpusPerNode: 4, cpuNodes: 1 })
    rest = new RestClient(cluster.kc)
    await cluster.createNamespace(NS, { 'pod-security.kubernetes.io/enforce': 'restricted' })
    await kubectl('apply', '--server-side', '-f', 'crds/averagingswarm.yaml')
    // Poll rather than `kubectl wait`, which fails outright while the CRD has no conditions yet.
    await waitFor('the CRD to be Established', async () => ((await rest.request('GET', resourcePath('CustomResourceDefinition', undefined, 'averagingswarms.averaging.swarm.io'))).status?.conditions ?? [])
      .some((c: { type: string, status: string }) => c.type === 'Established' && c.status === 'True'), 60_000)
    kubeconfig = await operatorKubeconfig(cluster)
    op = await startOperator(kubeconfig, cluster.logDir, 'operator-a')
    await waitFor('the operator to become ready', async () => await op.ready(), 60_000)
  })

  after(async () => {
    await op?.kill()
    await cluster?.stop()
  })

  test('the API server rejects every malformed swarm with a message naming the field', async () => {
    const wrong: string[] = []
    for (const [i, c] of MALFORMED.entries()) {
      try {
        await rest.request('POST', resourcePath('AveragingSwarm', NS), { body: malformedSwarm(c, i, NS) })
        wrong.push(`${c.what}: accepted`)
      } catch (e) {
        if (!(e instanceof ApiError) || e.code !== 422 || !e.message.includes(c.field)) wrong.push(`${c.what}: ${e instanceof ApiError ? `${e.code} ${e.message}` : String(e)}`)
      }
    }
    assert.deepEqual(wrong, [])
  })

  test('the API server and the local validator agree on the averaging bounds and on bootstrap peers: random sections and their edges pass, values just outside fail naming the field', async () => {
    reseed(1616)
    const cases: Array<{ spec: Record<string, unknown>, what: string }> = []
    for (let i = 0; i < 40; i++) cases.push({ spec: { averaging: randomAveraging() }, what: `random ${i}` })
    for (const k of AVERAGING_KEYS) {
      for (const v of OUTSIDE[k]) {
        const averaging: Record<string, unknown> = { [k]: v }
        if (k === 'requestTimeout') averaging.averagingExpiration = '1h'
        if (k === 'minGroupSize') averaging.targetGroupSize = 256
        cases.push({ spec: { averaging }, what: `${k}=${JSON.stringify(v)}` })
      }
    }
    // The multiaddr pattern must compile in the API server's regular expressions (RE2) and draw the
    // same line there as locally: its edges on both sides.
    const id = '12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA'
    // The Ed25519 peer ids' range (address-patterns.ts), and one past each end.
    const key = (prefixEnd: number, fill: number): string => base58([0x00, 0x24, 0x08, 0x01, 0x12, prefixEnd, ...new Array(32).fill(fill)])
    for (const peer of [
      `/ip4/255.255.255.255/tcp/65535/p2p/${id}`, `/ip4/0.0.0.0/tcp/0/p2p/${id}`, `/ip6/::1/tcp/4001/p2p/${id}`, `/ip6/2001:db8::8a2e:370:7334/tcp/4001/p2p/${id}`,
      `/dns4/swarm-0.example.com/tcp/31337/p2p/${id}`, `/dnsaddr/a/tcp/1/p2p/${id}`, `/dns/x/tcp/1/p2p/${key(0x20, 0)}`, `/dns6/x/tcp/1/p2p/${key(0x20, 0xff)}`,
      `/dns/x/tcp/1/p2p/${key(0x1f, 0xff)}`, `/dns/x/tcp/1/p2p/${key(0x21, 0)}`, `/dns/x/tcp/1/p2p/Qm${'a'.repeat(44)}`, `/dns6/x/tcp/1/p2p/16Uiu2HA${'b'.repeat(45)}`,
      `/ip4/10.0.0.256/tcp/4001/p2p/${id}`, `/ip4/10.0.0.1/tcp/65536/p2p/${id}`, `/ip4/10.0.0.1/tcp/0080/p2p/${id}`, `/ip6/2001:db8::g/tcp/1/p2p/${id}`,
      `/dns4/bad_host/tcp/1/p2p/${id}`, `/ip4/10.0.0.1/tcp/4001/ws/p2p/${id}`, `/ip4/10.0.0.1/tcp/4001/p2p/${id.slice(0, -1)}`
    ]) cases.push({ spec: { bootstrap: { replicas: 1, peers: [peer] } }, what: `bootstrap peer ${peer}` })
    const wrong: string[] = []
    for (const [i, c] of cases.entries()) {
      const base = swarmObject(`edge-${i}`, {})
      const body = { ...base, metadata: { name: `edge-${i}`, namespace: NS }, spec: { ...base.spec, ...c.spec } }
      const local = validateSwarm(body)
      let server: string | undefined
      try {
        await rest.request('POST', resourcePath('AveragingSwarm', NS), { body, query: { dryRun: 'All' } })
      } catch (e) {
        server = e instanceof ApiError && e.code === 422 ? e.message : `unexpected ${String(e)}`
      }
      if ((server === undefined) !== (local.length === 0)) wrong.push(`${c.what}: API server ${server ?? 'admits'}, local validator ${local.length === 0 ? 'admits' : local.join('; ')}`)
      else if (server !== undefined && !local.some(p => server!.includes(p.split(/[ :]/)[0]))) wrong.push(`${c.what}: API server names another field: ${server} vs ${local.join('; ')}`)
    }
    assert.deepEqual(wrong, [])
  })

  test('an agent that exits on its configuration: the Degraded condition and an Event say why', { skip: AGENT_BUILT ? false : 'needs dist/agent-bundle/main.js (npm run build)' }, async () => {
    // Every averaging parameter the CRD admits runs; a variable outside the averaging table
    // (AVS_KERNELS, which the operator leaves to the user) can still stop the agent.
    await rest.request('POST', resourcePath('AveragingSwarm', NS), {
      body: { apiVersion: 'averaging.swarm.io/v1alpha1', kind: 'AveragingSwarm', metadata: { name: 'exits', namespace: NS }, spec: { replicas: 1, podTemplate: { env: [{ name: 'AVS_KERNELS', value: 'bogus' }] } } }
    })
    try {
      const d = await waitFor('Degraded naming the exit line', async () => {
        const c = (await swarm('exits')).status?.conditions?.find((x: any) => x.type === 'Degraded')
        return c?.status === 'True' && c.message.includes('exits: agent configuration is invalid:') ? c : undefined
      }, 90_000, 1000)
      assert.equal(d.reason, 'AgentsFailing')
      assert.match(d.message, /exits-bootstrap-0-0 exits: agent configuration is invalid: AVS_KERNELS: "bogus" is not one of wasm-simd, js/)
      const events = await kubectl('get', 'events', '-n', NS, '--field-selector', 'involvedObject.kind=AveragingSwarm,involvedObject.name=exits', '-o', 'jsonpath={range .items[*]}{.reason}: {.message}{"\\n"}{end}')
      assert.match(events, /exits-bootstrap-0-0 exits: agent configuration is invalid: AVS_KERNELS/)
    } finally {
      await rest.request('DELETE', resourcePath('AveragingSwarm', NS, 'exits'))
    }
  })

  test('kubectl explain teaches the API from the schema descriptions', async () => {
    // kubectl learns the new resource from discovery, which lags the CRD's Established condition.
    const out = await waitFor('kubectl explain avs', async () => { const r = await cluster.kubectl('explain', 'avs.spec.averaging.minGroupSize'); return r.code === 0 ? r.stdout : undefined }, 60_000, 1000)
    assert.match(out, /A leader whose time is up starts only with at least this many members/)
  })

  test('the sidecar example passes the API server\'s validation, CEL rules included', async () => {
    const out = await kubectl('apply', '--dry-run=server', '-n', NS, '-f', 'examples/sidecar.yaml')
    assert.match(out, /averagingswarm.averaging.swarm.io\/finetune created \(server dry run\)/)
  })

  test('checkpoint and completion: examples/job.yaml passes the API server, which defaults every, keep and podPolicy as withDefaults() does', async () => {
    const out = await kubectl('apply', '--dry-run=server', '-n', NS, '-f', 'examples/job.yaml')
    assert.match(out, /averagingswarm.averaging.swarm.io\/job created \(server dry run\)/)
    const body = { apiVersion: 'averaging.swarm.io/v1alpha1', kind: 'AveragingSwarm', metadata: { name: 'defaults', namespace: NS }, spec: { checkpoint: { volume: { claimName: 'c' } }, completion: { rounds: 1000000000000 } } }
    const created = await rest.request('POST', resourcePath('AveragingSwarm', NS), { body, query: { dryRun: 'All' } })
    assert.deepEqual(created.spec.checkpoint, { every: 100, keep: 3, volume: { claimName: 'c' } })
    assert.deepEqual(created.spec.completion, { rounds: 1000000000000, onTrainerExit: false, podPolicy: 'Delete' })
    // The nested defaults of the other stores, too.
    for (const checkpoint of [{ volume: { claimTemplate: { size: '1Gi' } } }, { s3: { bucket: 'models', secretRef: { name: 'creds' } } }]) {
      const spec = { checkpoint, restoreFrom: { swarm: 'old' } }
      const made = await rest.request('POST', resourcePath('AveragingSwarm', NS), { body: { ...body, spec }, query: { dryRun: 'All' } })
      assert.deepEqual(made.spec.checkpoint, withDefaults(spec).checkpoint)
    }
  })

  test('examples/demo.yaml becomes owned objects, 8 scheduled agent pods passing Pod Security restricted, and a derived status', async () => {
    await kubectl('apply', '-n', NS, '-f', 'examples/demo.yaml')
    const s = await swarm('demo')
    for (const [kind, names] of [['StatefulSet', ['demo-agent', 'demo-bootstrap-0', 'demo-bootstrap-1']], ['Service', ['demo-agents']], ['Secret', ['demo-identity']], ['ConfigMap', ['demo-config', 'demo-members']], ['PodDisruptionBudget', ['demo']]] as const) {
      const objs = await waitFor(`${kind}s of demo`, async () => { const l = await list(kind, 'demo'); return l.length === names.length ? l : undefined }, 60_000)
      assert.deepEqual(objs.map(o => o.metadata.name).sort(), [...names].sort())
      for (const o of objs) assert.equal(o.metadata.ownerReferences?.[0]?.uid, s.metadata.uid, `${kind} ${o.metadata.name} is owned by the swarm`)
    }
    const pods = await waitFor('8 scheduled agent pods', async () => {
      const p = await livePods('demo')
      return p.length === 8 && p.every(x => x.spec.nodeName !== undefined) ? p : undefined
    }, 90_000)
    assert.ok(pods.every(p => p.spec.nodeName.startsWith('gpu-node-')), 'GPU agents land on GPU nodes')
    const st = await waitFor('status with 8 replicas', async () => { const x = (await swarm('demo')).status; return x?.replicas === 8 ? x : undefined }, 60_000)
    assert.equal(st.observedGeneration, s.metadata.generation)
    assert.equal(st.selector, 'averaging.swarm.io/swarm=demo,averaging.swarm.io/role in (agent,bootstrap)')
    assert.deepEqual(st.conditions.map((c: any) => c.type).sort(), ['Degraded', 'Progressing', 'Ready', 'Suspended'])
    for (const c of st.conditions) assert.equal(c.observedGeneration, s.metadata.generation)
    const secret = (await list('Secret', 'demo'))[0]
    assert.deepEqual(st.bootstrapPeers, [0, 1].map(i => `/dns4/demo-bootstrap-${i}-0.demo-agents.${NS}.svc.cluster.local/tcp/31337/p2p/${peerIdOf(secret.data, i)}`))
  })

  test(AGENT_BUILT ? 'the agents become Ready, average, and the swarm says Ready with rounds > 0' : 'without the agent build, the swarm is honestly Degraded, naming failing agents', async (t) => {
    if (AGENT_BUILT) {
      const started = Date.now()
      const st = await waitFor('phase Ready with rounds > 0', async () => { const x = (await swarm('demo')).status; return x?.phase === 'Ready' && x.roundsCompleted > 0 ? x : undefined }, 240_000, 1000)
      assert.equal(st.readyReplicas, 8)
      assert.ok(st.lastRoundTime)
      t.diagnostic(`Ready with rounds after ${((Date.now() - started) / 1000).toFixed(0)} s: readyReplicas ${st.readyReplicas}, roundsCompleted ${st.roundsCompleted}, meanGroupSize ${st.meanGroupSize}, lastRoundTime ${st.lastRoundTime}`)
      // The members ConfigMap put the agents on a Moshpit grid: 8 members in groups of 4 make two
      // keys, bits "0" and "1", four agents under each (bootstrap agents ranked first). An agent logs
      // its bits when its first round starts, one period after it turned Ready; agents turn Ready
      // seconds apart, so the first group can finish before the last agent started: wait for all.
      const gridBits = async () => Promise.all((await livePods('demo')).map(async p => {
        const log = await kubectl('logs', '-n', NS, p.metadata.name, '-c', AGENT_CONTAINER)
        return /on the Moshpit grid from now on: bits \\?"([01]*)\\?"/.exec(log)?.[1] ?? `none (${p.metadata.name})`
      }))
      let bits: string[] = []
      await waitFor('every agent placed on the Moshpit grid', async () => {
        bits = await gridBits()
        return bits.every(b => !b.startsWith('none')) ? bits : undefined
      }, 60_000, 2000).catch(() => undefined)
      assert.deepEqual(bits.sort(), ['0', '0', '0', '0', '1', '1', '1', '1'])
    } else {
      const st = await waitFor('phase Degraded', async () => { const x = (await swarm('demo')).status; return x?.phase === 'Degraded' ? x : undefined }, 90_000, 1000)
      const d = st.conditions.find((c: any) => c.type === 'Degraded')
      assert.equal(d.reason, 'AgentsFailing')
      assert.match(d.message, /demo-/)
    }
    const out = await kubectl('get', 'avs', '-n', NS)
    assert.match(out.split('\n')[0], /NAME\s+DESIRED\s+READY\s+ROUNDS\s+CHECKPOINT\s+PHASE\s+AGE/)
    const events = await kubectl('get', 'events', '-n', NS, '--field-selector', 'involvedObject.kind=AveragingSwarm', '-o', 'jsonpath={.items[*].reason}')
    assert.match(events, /Created/)
  })

  test('kubectl scale changes the agent count without touching the bootstrap agents', async () => {
    const bootstrapUids = async () => (await livePods('demo')).filter(p => p.metadata.labels['averaging.swarm.io/role'] === 'bootstrap').map(p => p.metadata.uid).sort()
    const before = await bootstrapUids()
    await kubectl('scale', '-n', NS, 'avs/demo', '--replicas=12')
    await waitFor('12 agent pods', async () => (await livePods('demo')).length === 12, 90_000)
    await waitFor('status.replicas 12', async () => (await swarm('demo')).status?.replicas === 12, 60_000)
    await kubectl('scale', '-n', NS, 'avs/demo', '--replicas=5')
    await waitFor('5 agent pods', async () => (await list('Pod', 'demo')).length === 5, 120_000)
    assert.deepEqual(await bootstrapUids(), before)
    assert.equal((await list('StatefulSet', 'demo')).find(x => x.metadata.name === 'demo-agent').spec.replicas, 3)
  })

  test('a spec change updates the ConfigMap and rolls the agents\' pod template', async () => {
    const hash = async () => (await list('StatefulSet', 'demo')).find(x => x.metadata.name === 'demo-agent').spec.template.metadata.annotations['averaging.swarm.io/config-hash']
    const before = await hash()
    await kubectl('patch', '-n', NS, 'avs/demo', '--type=merge', '-p', '{"spec":{"averaging":{"targetGroupSize":8}}}')
    await waitFor('ConfigMap with target 8', async () => (await list('ConfigMap', 'demo')).find(c => c.metadata.name === 'demo-config')?.data.AVS_TARGET_GROUP_SIZE === '8', 60_000)
    await waitFor('a new pod template', async () => (await hash()) !== before, 60_000)
    const set = await waitFor('the StatefulSet to start the roll', async () => {
      const x = (await list('StatefulSet', 'demo')).find(y => y.metadata.name === 'demo-agent')
      return x.status?.updateRevision !== undefined && x.status.updateRevision !== x.status.currentRevision || x.status?.updatedReplicas > 0 ? x : undefined
    }, 60_000)
    assert.ok(set)
  })

  test('suspend scales every agent to zero and back', async () => {
    await kubectl('patch', '-n', NS, 'avs/demo', '--type=merge', '-p', '{"spec":{"suspend":true}}')
    await waitFor('no agent pod', async () => (await list('Pod', 'demo')).length === 0, 120_000)
    // Settled: no agent, and the StatefulSets have caught up (Progressing False), so nothing is left to report.
    const st = await waitFor('phase Suspended and settled', async () => {
      const x = (await swarm('demo')).status
      return x?.phase === 'Suspended' && x.replicas === 0 && x.conditions.find((c: any) => c.type === 'Progressing')?.status === 'False' ? x : undefined
    }, 90_000)
    assert.equal(st.conditions.find((c: any) => c.type === 'Suspended').status, 'True')
  })

  test('at steady state a reconcile writes nothing', async () => {
    await waitFor('the operator to go quiet', async () => {
      const a = await op.metric('averagingswarm_operator_writes_total')
      await new Promise(resolve => setTimeout(resolve, 3000))
      return a === await op.metric('averagingswarm_operator_writes_total')
    }, 60_000, 0)
    const writesBefore = await op.metric('averagingswarm_operator_writes_total')
    const reconcilesBefore = await op.metric('controller_runtime_reconcile_total')
    const versions = async () => JSON.stringify(await Promise.all((['StatefulSet', 'Service', 'Secret', 'ConfigMap', 'PodDisruptionBudget'] as const).map(async k => (await list(k, 'demo')).map(o => o.metadata.resourceVersion))))
    const rvBefore = await versions()
    for (let i = 0; i < 3; i++) { // a metadata change queues a reconcile without changing the spec
      await kubectl('annotate', '-n', NS, 'avs/demo', `touch=${i}`, '--overwrite')
      await new Promise(resolve => setTimeout(resolve, 1000))
    }
    await waitFor('the touches to be reconciled', async () => ((await op.metric('controller_runtime_reconcile_total')) ?? 0) >= (reconcilesBefore ?? 0) + 3, 30_000)
    assert.equal(await op.metric('averagingswarm_operator_writes_total'), writesBefore)
    assert.equal(await versions(), rvBefore)
  })

  test('resuming brings the agents back', async () => {
    await kubectl('patch', '-n', NS, 'avs/demo', '--type=merge', '-p', '{"spec":{"suspend":false}}')
    await waitFor('5 agent pods again', async () => (await livePods('demo')).length === 5, 90_000)
  })

  test('two operator replicas: exactly one leads; a graceful stop hands over at once, a crash after the lease expires', async () => {
    const lease = async () => (await rest.request('GET', resourcePath('Lease', 'default', 'averaging-swarm-operator'))).spec
    const b = await startOperator(kubeconfig, cluster.logDir, 'operator-b')
    let c: OperatorProcess | undefined
    try {
      await waitFor('operator-b ready', async () => await b.ready(), 60_000)
      await new Promise(resolve => setTimeout(resolve, 3000))
      assert.equal(await op.metric('leader_election_master_status'), 1)
      assert.equal(await b.metric('leader_election_master_status'), 0)
      assert.equal(await b.metric('controller_runtime_reconcile_total') ?? 0, 0, 'the standby reconciles nothing')
      assert.equal((await lease()).holderIdentity, 'operator-a')
      const stopped = Date.now()
      assert.equal(await op.kill('SIGTERM'), 0, 'SIGTERM is a clean exit')
      await waitFor('operator-b to lead', async () => (await b.metric('leader_election_master_status')) === 1, 30_000, 200)
      const handover = Date.now() - stopped
      assert.ok(handover < 8000, `a released lease is taken within a retry period or two, not after its 15 s duration (took ${handover} ms)`)
      c = await startOperator(kubeconfig, cluster.logDir, 'operator-c')
      await waitFor('operator-c ready', async () => await c!.ready(), 60_000)
      const crashed = Date.now()
      await b.kill('SIGKILL') // no release: c must wait the lease out
      await waitFor('operator-c to lead', async () => (await c!.metric('leader_election_master_status')) === 1, 60_000, 500)
      assert.ok(Date.now() - crashed >= 10_000, 'a crashed leader\'s lease is respected until it expires')
      assert.equal((await lease()).holderIdentity, 'operator-c')
      await kubectl('scale', '-n', NS, 'avs/demo', '--replicas=6')
      await waitFor('operator-c to reconcile the scale', async () => (await list('StatefulSet', 'demo')).find(x => x.metadata.name === 'demo-agent').spec.replicas === 4, 60_000)
    } finally {
      await b.kill('SIGKILL')
      op = c ?? op // the after() hook stops whichever runs
    }
  })

  test('restarting the operator mid-reconcile leaves no duplicate or orphan and keeps identities', async () => {
    const body = { apiVersion: 'averaging.swarm.io/v1alpha1', kind: 'AveragingSwarm', metadata: { name: 'restart', namespace: NS }, spec: { replicas: 3, bootstrap: { replicas: 2 }, tolerations: [{ key: 'nvidia.com/gpu', operator: 'Exists', effect: 'NoSchedule' }] } }
    await rest.request('POST', resourcePath('AveragingSwarm', NS), { body })
    const secret = await waitFor('the identity Secret', async () => (await list('Secret', 'restart'))[0], 30_000, 50)
    await op.kill('SIGKILL')
    op = await startOperator(kubeconfig, cluster.logDir, 'operator-c', ['--no-leader-elect'])
    // The next test reads this operator's metrics: it must be serving them, not merely started (a
    // clean-clone CI run read them 8 s after the start, loaded, and got "fetch failed").
    await waitFor('the restarted operator-c ready', async () => await op.ready(), 60_000)
    await waitFor('all objects of restart', async () => (await list('StatefulSet', 'restart')).length === 3 && (await list('PodDisruptionBudget', 'restart')).length === 1, 60_000)
    assert.equal((await list('Secret', 'restart')).length, 1)
    assert.deepEqual((await list('Secret', 'restart'))[0].data, secret.data, 'keys generated before the restart are kept')
    assert.equal((await list('Service', 'restart')).length, 1)
    assert.deepEqual((await list('ConfigMap', 'restart')).map(c => c.metadata.name).sort(), ['restart-config', 'restart-members'])
  })

  test('deleting the swarm removes everything it owned', async () => {
    await kubectl('delete', '-n', NS, 'avs/demo', '--wait=true')
    await waitFor('every demo object to be garbage-collected', async () => {
      for (const k of ['Pod', 'StatefulSet', 'Service', 'Secret', 'ConfigMap', 'PodDisruptionBudget'] as const) if ((await list(k, 'demo')).length > 0) return false
      return true
    }, 120_000, 500)
    assert.equal(await op.metric('averagingswarm_agents_desired', { swarm: 'demo' }), undefined, 'its gauges are gone too')
  })
})
