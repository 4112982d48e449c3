/**
 * Checkpoints and completion end to end on the real test cluster: a swarm with spec.checkpoint and spec.completion,
 * run by the real operator (its chart's RBAC) and real agent processes, reaches Complete, and its
 * final checkpoint in the claim is the agents' averaged state.
 *
 * The claim is what a cluster would give: a PersistentVolume (hostPath under the cluster's dir,
 * ReadWriteMany, storageClassName "") bound by kube-controller-manager to a PersistentVolumeClaim
 * naming it; the scheduler's VolumeBinding plugin places the agents only once it is Bound, and the
 * test kubelet mounts the PV's hostPath for every pod of the claim (one shared folder).
 */
import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { basename, join } from 'node:path'
import { controlPlaneBuilt, hostPathClaim, startCluster, waitFor, type Cluster } from '../harness/index.js'
import { RestClient } from '../../operator/kube/rest.js'
import { resourcePath } from '../../operator/kube/resources.js'
import type { OperatorProcess } from '../operator/e2e/operator-process.js'
import { installOperator } from './operator-identity.js'
import { listCheckpoints, loadNewestCheckpoint } from '../../agent/checkpoint/index.js'
import { AGENT_CONTAINER } from '../../operator/builders/pod-template.js'
import { loadTensorBackend } from '../../agent/tensors/backend.js'
import { LocalModel } from '../../agent/workloads/builtin/model.js'
import { makeHeldOut } from '../../agent/workloads/builtin/synthetic-data.js'

const NS = 'ml'
const SWARM = 'ckpt'
const CLAIM = 'avs-checkpoints'
const PV = 'avs-checkpoints-pv'
const ROUNDS = 6
const AGENT_BUILT = existsSync('dist/agent-bundle/main.js')
const skip = !controlPlaneBuilt() ? 'the control plane is not built: run npm run cluster:build' : !AGENT_BUILT ? 'needs dist/agent-bundle/main.js (npm run build)' : false

describe('checkpoints and completion on a real cluster', { skip, timeout: 600_000 }, () => {
  let cluster: Cluster
  let rest: RestClient
  let op: OperatorProcess | undefined
  /** The PersistentVolume's hostPath: what the claim is on this "node". */
  let pvDir: string

  const kubectl = async (...args: string[]) => {
    const r = await cluster.kubectl(...args)
    assert.equal(r.code, 0, `kubectl ${args.join(' ')}: ${r.stderr}`)
    return r.stdout
  }
  const swarm = async () => await rest.request('GET', resourcePath('AveragingSwarm', NS, SWARM))
  const list = async (kind: 'Pod' | 'StatefulSet') =>
    (await rest.request('GET', resourcePath(kind, NS), { query: { labelSelector: `averaging.swarm.io/swarm=${SWARM}` } })).items as any[]

  before(async () => {
    cluster = await startCluster({ gpuNodes: 3, gpusPerNode: 1, cpuNodes: 1 })
    rest = new RestClient(cluster.kc)
    pvDir = join(cluster.dir, 'volumes', PV)
    op = await installOperator(cluster, NS)
  })

  after(async () => {
    await op?.kill()
    await cluster?.stop()
  })

  test('the test kubelet mounts a claim only once it is bound: ContainerCreating with a FailedMount Event before, the PV\'s folder after', async () => {
    // spec.nodeName set: past the scheduler (whose VolumeBinding would not place a pod with an unbound claim), as a kubelet may see it.
    await cluster.createNamespace('vol')
    const dir = join(cluster.dir, 'volumes', 'late-pv')
    await rest.request('POST', '/api/v1/namespaces/vol/pods', {
      body: {
        apiVersion: 'v1', kind: 'Pod', metadata: { name: 'writer', namespace: 'vol' },
        spec: {
          nodeName: cluster.nodeNames.find(n => n.startsWith('cpu-node-')),
          restartPolicy: 'Never',
          containers: [{ name: 'c', image: 'busybox', command: ['sh', '-c', 'echo "$GREETING" > /data/hello'], env: [{ name: 'GREETING', value: 'from the pod' }], volumeMounts: [{ name: 'data', mountPath: '/data' }] }],
          volumes: [{ name: 'data', persistentVolumeClaim: { claimName: 'late' } }]
        }
      }
    })
    const event = await waitFor('a FailedMount Event', async () => {
      const events = (await rest.request('GET', '/api/v1/namespaces/vol/events', { query: { fieldSelector: 'involvedObject.name=writer' } })).items as any[]
      return events.find(e => e.reason === 'FailedMount')
    }, 60_000, 500)
    assert.equal(event.type, 'Warning')
    assert.match(event.message, /volume "data": persistentvolumeclaim "late" not found/)
    const waiting = (await rest.request('GET', '/api/v1/namespaces/vol/pods/writer')).status?.containerStatuses?.[0]?.state?.waiting
    assert.equal(waiting?.reason, 'ContainerCreating')
    await hostPathClaim(cluster, { namespace: 'vol', claim: 'late', pv: 'late-pv', path: dir })
    await waitFor('the pod to succeed', async () => (await rest.request('GET', '/api/v1/namespaces/vol/pods/writer')).status?.phase === 'Succeeded', 60_000, 500)
    assert.equal(readFileSync(join(dir, 'hello'), 'utf8'), 'from the pod\n', 'the pod wrote into the PersistentVolume\'s hostPath')
  })

  test(`a swarm with checkpoint.every 2 and completion.rounds ${ROUNDS} reaches Complete; its final checkpoint in the claim is the agents' average; kubectl wait --for=condition=Complete returns`, async (t) => {
    const started = Date.now()
    await hostPathClaim(cluster, { namespace: NS, claim: CLAIM, pv: PV, path: pvDir })
    await rest.request('POST', resourcePath('AveragingSwarm', NS), {
      body: {
        apiVersion: 'averaging.swarm.io/v1alpha1', kind: 'AveragingSwarm', metadata: { name: SWARM, namespace: NS },
        spec: {
          replicas: 3,
          resources: { limits: { 'nvidia.com/gpu': 1 } },
          tolerations: [{ key: 'nvidia.com/gpu', operator: 'Exists', effect: 'NoSchedule' }],
          averaging: { targetGroupSize: 3, minGroupSize: 2, averagingExpiration: '3s', requestTimeout: '1s', allreduceTimeout: '20s', period: '2s' },
          bootstrap: { replicas: 1 },
          workload: { type: 'builtin' },
          checkpoint: { every: 2, keep: 3, volume: { claimName: CLAIM } },
          completion: { rounds: ROUNDS }
        }
      }
    })
    const pods = await waitFor('3 agent pods on 3 nodes', async () => { const p = await list('Pod'); return p.length === 3 && p.every(x => x.spec.nodeName !== undefined) ? p : undefined }, 120_000, 500)
    assert.equal(new Set(pods.map(p => p.spec.nodeName)).size, 3, 'one folder shared across nodes')
    assert.ok(pods.every(p => p.spec.volumes.some((v: any) => v.persistentVolumeClaim?.claimName === CLAIM)))

    const st = await waitFor('Complete=True and phase Succeeded', async () => {
      const x = (await swarm()).status
      return x?.phase === 'Succeeded' && x.conditions?.some((c: any) => c.type === 'Complete' && c.status === 'True') ? x : undefined
    }, 400_000, 1000)
    t.diagnostic(`Complete after ${((Date.now() - started) / 1000).toFixed(0)} s: checkpoint ${JSON.stringify(st.checkpoint)}, completionTime ${st.completionTime}, roundsCompleted ${st.roundsCompleted}`)
    assert.ok(!Number.isNaN(Date.parse(st.completionTime)), 'status.completionTime is set')
    assert.ok(st.checkpoint.round >= ROUNDS, `status.checkpoint.round ${st.checkpoint.round} >= ${ROUNDS}`)
    assert.equal(st.checkpoint.location, `pvc/${CLAIM}/${SWARM}/round-${st.checkpoint.round as number}.json`)
    assert.match(st.conditions.find((c: any) => c.type === 'Complete').message, /final checkpoint durable/)

    // podPolicy Delete (the default): every agent StatefulSet at 0, the pods gone.
    const sets = await list('StatefulSet')
    assert.deepEqual(sets.map(s => s.metadata.name).sort(), [`${SWARM}-agent`, `${SWARM}-bootstrap-0`])
    assert.ok(sets.every(s => s.spec.replicas === 0), `replicas ${sets.map(s => `${s.metadata.name as string}=${s.spec.replicas as number}`).join(', ')}`)
    await waitFor('the agent pods to be gone', async () => (await list('Pod')).length === 0, 120_000, 500)

    // The claim's folder, as a user would read it after the run.
    const model = new LocalModel((await loadTensorBackend()).tf, 0)
    try {
      const schema = model.shapes.map(([name, shape]) => ({ name, shape, dtype: 'float32' as const }))
      const skipped: string[] = []
      const { checkpoint } = await loadNewestCheckpoint(pvDir, SWARM, schema, { log: line => skipped.push(line) })
      assert.ok(checkpoint !== null, `a checkpoint in ${pvDir}/${SWARM}`)
      assert.deepEqual(skipped, [], 'the newest checkpoint verifies (manifest, header, sha256 of every tensor)')
      assert.equal(checkpoint.manifest.round, st.checkpoint.round, 'the final checkpoint is the round status.checkpoint names')
      assert.equal(checkpoint.manifest.swarm, SWARM)
      assert.equal(basename(checkpoint.path), checkpoint.manifest.file.name)
      const complete = (await listCheckpoints(pvDir, SWARM)).filter(c => c.manifest && c.data).map(c => c.round)
      assert.ok(complete.length <= 3 && complete.includes(st.checkpoint.round), `keep 3: complete rounds ${complete.join(', ')}`)
      assert.equal(JSON.parse(readFileSync(join(pvDir, SWARM, 'latest'), 'utf8')).round, st.checkpoint.round)
      for (const [name, values] of checkpoint.tensors) assert.ok(values.every(Number.isFinite), `${name}: finite values`)

      // Its values are the writer's averaged weights of that round: the held-out loss the writer
      // logged right after loading that average ("averaged", round n) is the loss of the checkpoint.
      const logs = readdirSync(join(cluster.dir, 'kubelet', 'logs')).filter(d => d.startsWith(`${NS}_${SWARM}-`)).map(d => join(cluster.dir, 'kubelet', 'logs', d, `${AGENT_CONTAINER}.log`)).filter(f => existsSync(f))
      const lines = logs.flatMap(f => readFileSync(f, 'utf8').split('\n')).filter(l => l.startsWith('{')).map(l => JSON.parse(l))
      const round = checkpoint.manifest.round
      const writer = lines.find(l => typeof l.msg === 'string' && l.msg.startsWith(`checkpointed round ${round} to `) && l.msg.includes(checkpoint.manifest.file.name))
      assert.ok(writer !== undefined, `an agent logged writing ${checkpoint.manifest.file.name}`)
      const averaged = lines.find(l => l.pod === writer.pod && l.msg === 'averaged' && l.round === round)
      assert.ok(averaged !== undefined, `${String(writer.pod)} logged its round ${round}`)
      model.loadWeights(model.shapes.map(([name, shape]) => ({ name, shape, data: checkpoint.tensors.get(name)! })))
      const loss = model.evaluate(makeHeldOut(512))
      t.diagnostic(`checkpoint round ${round} by ${String(writer.pod)}: held-out loss ${loss}, the agent logged ${String(averaged.heldOutLoss)}`)
      assert.ok(Math.abs(loss - averaged.heldOutLoss) <= 1e-5 * Math.max(1, Math.abs(loss)), `held-out loss of the checkpoint ${loss} = the agent's ${String(averaged.heldOutLoss)}`)
    } finally {
      model.dispose()
    }

    // The Job-like contract: kubectl waits for Complete like for a Job.
    const out = await kubectl('wait', '-n', NS, '--for=condition=Complete', `avs/${SWARM}`, '--timeout=60s')
    assert.match(out, new RegExp(`averagingswarm.averaging.swarm.io/${SWARM} condition met`))
    t.diagnostic(`whole test ${((Date.now() - started) / 1000).toFixed(0)} s`)
  })
})
