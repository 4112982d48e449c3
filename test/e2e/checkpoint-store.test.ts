/**
 * Checkpoint stores finishing and failing on the real test cluster, three swarms at once under the real
 * operator (operator/rbac.ts's rules only) and real agent processes:
 *
 *  - tmpl:    checkpoint.volume.claimTemplate: the operator creates tmpl-checkpoints (no owner
 *             reference), the test binds it to a hostPath PersistentVolume as a provisioner would,
 *             the agents checkpoint into it; every pod is force-deleted at once and the new agents
 *             restore the newest checkpoint; the claim and its files outlive the swarm.
 *  - crash:   a sidecar swarm whose trainer exits 1 at once, backoffLimit 2: the test kubelet's
 *             restarts (restartCount) make it Failed, kubectl wait --for=condition=Failed returns,
 *             its StatefulSets are at 0.
 *  - noclaim: a swarm naming a claim that does not exist still runs and averages, with
 *             CheckpointsFailing=True ClaimNotFound and an Event; once the claim exists the
 *             agents roll onto it.
 *  - bucket:  checkpoint.s3 against a real S3-compatible server (versitygw on loopback) with the
 *             credentials in a Secret: Complete after 3 rounds, status.checkpoint at s3://, and the
 *             final checkpoint in the bucket verifies (every tensor's sha256).
 */
import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, readFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { controlPlaneBuilt, hostPathClaim, hostPathVolumeFor, startCluster, waitFor, type Cluster } from '../harness/index.js'
import { RestClient } from '../../operator/kube/rest.js'
import { resourcePath } from '../../operator/kube/resources.js'
import type { OperatorProcess } from '../operator/e2e/operator-process.js'
import { installOperator } from './operator-identity.js'
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3'
import { S3CheckpointStore } from '../../agent/checkpoint/s3-store.js'
import { startVersitygw, versitygwBinary, versitygwBuilt } from '../agent/checkpoint/versitygw.js'

const NS = 'ml'
const AGENT_BUILT = existsSync('dist/agent-bundle/main.js')
const skip = !controlPlaneBuilt() ? 'the control plane is not built: run npm run cluster:build' : !AGENT_BUILT ? 'needs dist/agent-bundle/main.js (npm run build)' : false
/** Rounds every few seconds: groups of two, short timeouts. */
const FAST = { targetGroupSize: 2, minGroupSize: 2, averagingExpiration: '3s', requestTimeout: '1s', allreduceTimeout: '20s', period: '2s' }
const TRAINER_LINE = 'trainer: no data to train on'

const swarmBody = (name: string, spec: Record<string, unknown>) => ({ apiVersion: 'averaging.swarm.io/v1alpha1', kind: 'AveragingSwarm', metadata: { name, namespace: NS }, spec })

describe('checkpoint stores and phase Failed on a real cluster', { skip, timeout: 300_000 }, () => {
  let cluster: Cluster
  let rest: RestClient
  let op: OperatorProcess | undefined
  /** tmpl's claim as the operator made it, bound in the background while the other swarms run. */
  let templateClaim: Promise<any>
  let pvDir: string
  let started = Date.now()

  const kubectl = async (...args: string[]) => {
    const r = await cluster.kubectl(...args)
    assert.equal(r.code, 0, `kubectl ${args.join(' ')}: ${r.stderr}`)
    return r.stdout
  }
  const get = async (kind: 'AveragingSwarm' | 'PersistentVolumeClaim', name: string) => {
    try { return await rest.request('GET', resourcePath(kind, NS, name)) } catch { return undefined }
  }
  const status = async (name: string) => (await get('AveragingSwarm', name))?.status
  const cond = (st: any, type: string) => st?.conditions?.find((c: any) => c.type === type)
  const list = async (kind: 'Pod' | 'StatefulSet', swarm: string) =>
    (await rest.request('GET', resourcePath(kind, NS), { query: { labelSelector: `averaging.swarm.io/swarm=${swarm}` } })).items as any[]

  before(async () => {
    cluster = await startCluster({ gpuNodes: 0, cpuNodes: 2, restartBackoff: { initialMs: 500, maxMs: 4000 } })
    rest = new RestClient(cluster.kc)
    op = await installOperator(cluster, NS)
    // All three at once: each test below waits for its own.
    const common = { replicas: 2, bootstrap: { replicas: 1 }, averaging: FAST, workload: { type: 'builtin' } }
    await rest.request('POST', resourcePath('AveragingSwarm', NS), { body: swarmBody('crash', { replicas: 1, bootstrap: { replicas: 1 }, backoffLimit: 2, workload: { type: 'sidecar', trainer: { image: 'busybox', command: ['sh', '-c', `echo "${TRAINER_LINE}" >&2; exit 1`] } } }) })
    await rest.request('POST', resourcePath('AveragingSwarm', NS), { body: swarmBody('tmpl', { ...common, checkpoint: { every: 1, volume: { claimTemplate: { size: '1Gi', storageClassName: '' } } } }) })
    await rest.request('POST', resourcePath('AveragingSwarm', NS), { body: swarmBody('noclaim', { ...common, checkpoint: { every: 1, volume: { claimName: 'missing-claim' } } }) })
    started = Date.now()
    pvDir = join(cluster.dir, 'volumes', 'tmpl-pv')
    templateClaim = (async () => {
      const claim = await waitFor('the claim from the template', async () => await get('PersistentVolumeClaim', 'tmpl-checkpoints'), 60_000, 500)
      await hostPathVolumeFor(cluster, { namespace: NS, claim: 'tmpl-checkpoints', pv: 'tmpl-pv', path: pvDir })
      return claim
    })()
    templateClaim.catch(() => {}) // reported by its test
  })

  after(async () => {
    await op?.kill()
    await cluster?.stop()
  })

  test('examples/finishing.yaml (claimTemplate, restoreFrom, onTrainerExit, backoffLimit) passes the API server, CEL rules included', async () => {
    const out = await kubectl('apply', '--dry-run=server', '-n', NS, '-f', 'examples/finishing.yaml')
    assert.match(out, /averagingswarm.averaging.swarm.io\/finetune created \(server dry run\)/)
  })

  test('a trainer that exits 1 at once, backoffLimit 2: Failed=True BackoffLimitExceeded naming it, phase Failed, kubectl wait returns, StatefulSets at 0', async (t) => {
    const out = await kubectl('wait', '-n', NS, '--for=condition=Failed', 'avs/crash', '--timeout=90s')
    assert.match(out, /averagingswarm.averaging.swarm.io\/crash condition met/)
    const st = await status('crash')
    const failed = cond(st, 'Failed')
    t.diagnostic(`Failed ${((Date.now() - started) / 1000).toFixed(0)} s after creation: ${failed.message as string}`)
    assert.equal(st.phase, 'Failed')
    assert.equal(failed.reason, 'BackoffLimitExceeded')
    assert.match(failed.message, /^\d+ restarts of agent and trainer containers exceed spec\.backoffLimit 2; every agent is scaled to zero\. Most: container trainer of crash-bootstrap-0-0 \(\d+ restarts\), last exit: trainer: no data to train on\.$/)
    assert.ok(!Number.isNaN(Date.parse(st.failureTime)))
    await waitFor('every StatefulSet at 0 and the pods gone', async () => {
      const sets = await list('StatefulSet', 'crash')
      return sets.length > 0 && sets.every(s => s.spec.replicas === 0) && (await list('Pod', 'crash')).length === 0
    }, 60_000, 500)
    const wide = (await kubectl('get', 'avs', 'crash', '-n', NS, '-o', 'wide')).trim().split('\n')
    // Fixed-width columns, some empty: cut the row where the header's columns start.
    const column = (name: string) => {
      const start = wide[0].indexOf(name)
      const next = wide[0].slice(start + name.length).search(/\S/)
      return wide[1].slice(start, next < 0 ? undefined : start + name.length + next).trim()
    }
    assert.equal(column('PHASE'), 'Failed', wide.join('\n'))
    assert.match(column('FAILED'), /^\d+[smhd]/, 'kubectl get avs -o wide shows when it failed')
    const events = await kubectl('get', 'events', '-n', NS, '--field-selector', 'involvedObject.kind=AveragingSwarm,involvedObject.name=crash', '-o', 'jsonpath={range .items[*]}{.reason}{"\\n"}{end}')
    assert.match(events, /BackoffLimitExceeded/)
  })

  test('a claim named but missing: the agents run and average without checkpoints, CheckpointsFailing=True ClaimNotFound, an Event; once it exists they roll onto it', async (t) => {
    const st = await waitFor('noclaim averaging with ClaimNotFound', async () => {
      const x = await status('noclaim')
      return (x?.roundsCompleted ?? 0) > 0 && x.readyReplicas === 2 && cond(x, 'CheckpointsFailing')?.reason === 'ClaimNotFound' ? x : undefined
    }, 150_000, 1000)
    t.diagnostic(`averaging without the claim ${((Date.now() - started) / 1000).toFixed(0)} s: ${st.roundsCompleted as number} rounds`)
    const c = cond(st, 'CheckpointsFailing')
    assert.equal(c.status, 'True')
    assert.equal(c.message, 'PersistentVolumeClaim missing-claim (spec.checkpoint.volume.claimName) does not exist in namespace ml; the agents average without checkpoints until it does.')
    const pods = await list('Pod', 'noclaim')
    assert.ok(pods.every(p => !p.spec.volumes.some((v: any) => v.name === 'avs-checkpoints')), 'no checkpoint volume')
    const events = await kubectl('get', 'events', '-n', NS, '--field-selector', 'involvedObject.kind=AveragingSwarm,involvedObject.name=noclaim', '-o', 'jsonpath={range .items[*]}{.type}/{.reason}: {.message}{"\\n"}{end}')
    assert.match(events, /Warning\/ClaimNotFound: PersistentVolumeClaim missing-claim/)
    // The claim appears: its watch event reconciles the swarm, whose pods roll onto it.
    await hostPathClaim(cluster, { namespace: NS, claim: 'missing-claim', pv: 'late-pv', path: join(cluster.dir, 'volumes', 'late-pv') })
    await waitFor('CheckpointsFailing False and both agents on the claim', async () => {
      const pods = (await list('Pod', 'noclaim')).filter(p => p.metadata.deletionTimestamp === undefined)
      return cond(await status('noclaim'), 'CheckpointsFailing')?.status === 'False' && pods.length === 2 &&
        pods.every(p => p.spec.volumes.some((v: any) => v.persistentVolumeClaim?.claimName === 'missing-claim'))
    }, 90_000, 500)
    t.diagnostic(`rolled onto the claim ${((Date.now() - started) / 1000).toFixed(0)} s after creation`)
    await rest.request('DELETE', resourcePath('AveragingSwarm', NS, 'noclaim'))
  })

  test('claimTemplate: the operator creates tmpl-checkpoints without an owner; bound, the agents checkpoint into it; it outlives the swarm', async (t) => {
    const claim = await templateClaim
    assert.equal(claim.metadata.ownerReferences, undefined, 'no owner: garbage collection never takes it')
    assert.equal(claim.metadata.labels['averaging.swarm.io/swarm'], 'tmpl')
    assert.deepEqual(claim.spec.accessModes, ['ReadWriteMany'])
    assert.equal(claim.spec.resources.requests.storage, '1Gi')
    const st = await waitFor('a durable checkpoint', async () => { const x = await status('tmpl'); return (x?.checkpoint?.round ?? 0) > 0 ? x : undefined }, 150_000, 1000)
    t.diagnostic(`checkpoint ${JSON.stringify(st.checkpoint)} ${((Date.now() - started) / 1000).toFixed(0)} s after creation`)
    assert.equal(st.checkpoint.location, `pvc/tmpl-checkpoints/tmpl/round-${st.checkpoint.round as number}.json`)
    assert.equal(cond(st, 'CheckpointsFailing')?.status, 'False')
    const files = () => readdirSync(join(pvDir, 'tmpl'))
    assert.ok(files().some(f => /^round-\d+\.json$/.test(f)), files().join(', '))

    // Every agent pod at once, no grace: the StatefulSets bring new ones, which find no live peer and restore the newest checkpoint.
    const durable = (await status('tmpl')).checkpoint.round as number
    const old = await list('Pod', 'tmpl')
    await kubectl('delete', 'pods', '-n', NS, '-l', 'averaging.swarm.io/swarm=tmpl', '--grace-period=0', '--force', '--wait=false')
    const restored = await waitFor('a new agent restored from the checkpoint', async () => {
      const pods = (await list('Pod', 'tmpl')).filter(p => !old.some(o => o.metadata.uid === p.metadata.uid))
      for (const p of pods) {
        const file = cluster.containerLogFile(NS, p.metadata.name, 'agent', p.metadata.uid)
        const text = file !== undefined && existsSync(file) ? readFileSync(file, 'utf8') : ''
        const m = /restored round (\d+) from checkpoint/.exec(text)
        if (m !== null) return Number(m[1])
      }
      return undefined
    }, 120_000, 500)
    t.diagnostic(`every pod deleted at round ${durable} durable: a new agent restored round ${restored}`)
    assert.ok(restored >= durable, `restored round ${restored} is not older than the durable round ${durable} before the kill`)

    await rest.request('DELETE', resourcePath('AveragingSwarm', NS, 'tmpl'))
    await waitFor('the swarm and its StatefulSets gone', async () => await get('AveragingSwarm', 'tmpl') === undefined && (await list('StatefulSet', 'tmpl')).length === 0, 60_000, 500)
    const kept = await get('PersistentVolumeClaim', 'tmpl-checkpoints')
    assert.equal(kept?.metadata.uid, claim.metadata.uid, 'the same claim is still there')
    assert.equal(kept?.metadata.deletionTimestamp, undefined)
    assert.ok(files().some(f => /^round-\d+\.json$/.test(f)), 'and so are the checkpoints')
    t.diagnostic(`all three done ${((Date.now() - started) / 1000).toFixed(0)} s after the swarms were created`)
  })

  test('checkpoint.s3: agents write into a real S3-compatible bucket with the credentials from a Secret; Complete, status.checkpoint at s3://, the final checkpoint verifies', {
    skip: versitygwBuilt() ? false : `versitygw is not built (${versitygwBinary()}): run scripts/build-versitygw.sh`
  }, async (t) => {
    const gw = await startVersitygw()
    const credentials = { accessKeyId: gw.accessKeyId, secretAccessKey: gw.secretAccessKey }
    const raw = new S3Client({ endpoint: gw.endpoint, region: 'us-east-1', forcePathStyle: true, credentials })
    const store = new S3CheckpointStore({ endpoint: gw.endpoint, region: 'us-east-1', bucket: 'avs', prefix: 'runs', forcePathStyle: true, credentials })
    try {
      await raw.send(new CreateBucketCommand({ Bucket: 'avs' }))
      await kubectl('create', 'secret', 'generic', 's3-creds', '-n', NS, `--from-literal=AWS_ACCESS_KEY_ID=${gw.accessKeyId}`, `--from-literal=AWS_SECRET_ACCESS_KEY=${gw.secretAccessKey}`)
      const begun = Date.now()
      await rest.request('POST', resourcePath('AveragingSwarm', NS), {
        body: swarmBody('bucket', {
          replicas: 2, bootstrap: { replicas: 1 }, averaging: FAST, workload: { type: 'builtin' },
          checkpoint: { every: 1, s3: { bucket: 'avs', endpoint: gw.endpoint, prefix: 'runs', forcePathStyle: true, secretRef: { name: 's3-creds' } } },
          completion: { rounds: 3 }
        })
      })
      const out = await kubectl('wait', '-n', NS, '--for=condition=Complete', 'avs/bucket', '--timeout=150s')
      assert.match(out, /averagingswarm.averaging.swarm.io\/bucket condition met/)
      const st = await status('bucket')
      t.diagnostic(`Complete ${((Date.now() - begun) / 1000).toFixed(0)} s after creation, checkpoint ${JSON.stringify(st.checkpoint)}`)
      assert.equal(st.phase, 'Succeeded')
      assert.ok(st.checkpoint.round >= 3, `the final checkpoint is round 3 or later (${st.checkpoint.round as number})`)
      assert.equal(st.checkpoint.location, `s3://avs/runs/bucket/round-${st.checkpoint.round as number}.json`)
      assert.equal(cond(st, 'CheckpointsFailing')?.status, 'False')
      const { checkpoint, skipped } = await store.loadNewest('bucket', undefined, { log: () => {} })
      assert.deepEqual(skipped, [])
      assert.ok(checkpoint !== null, 'a checkpoint in the bucket verifies')
      assert.equal(checkpoint.manifest.round, st.checkpoint.round)
      assert.equal(checkpoint.manifest.swarm, 'bucket')
      assert.ok(checkpoint.tensors.size > 0 && [...checkpoint.tensors.values()].every(v => v.length > 0 && v.every(Number.isFinite)), 'finite tensors')
    } finally {
      store.destroy()
      raw.destroy()
      await gw.stop()
    }
  })
})
