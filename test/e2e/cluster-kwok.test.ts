/**
 * kwok scale proof: 50 pods on kwok-managed fake GPU nodes become Running, scheduled by the real
 * scheduler, without a single local process.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { AppsV1Api, CoreV1Api } from '@kubernetes/client-node'
import { startCluster, controlPlaneBuilt, waitFor, GPU_RESOURCE, type Cluster } from '../harness/index.js'
import { existsSync } from 'node:fs'
import { Resolver } from 'node:dns/promises'
import { join } from 'node:path'
import { binDir } from '../harness/paths.js'

const notBuilt = controlPlaneBuilt() && existsSync(join(binDir(), 'kwok')) ? false : 'the control plane or kwok is not built: run `npm run cluster:build`'

describe('test cluster with kwok nodes', { skip: notBuilt, timeout: 240_000 }, () => {
  let cluster: Cluster

  before(async () => {
    cluster = await startCluster({ gpuNodes: 0, cpuNodes: 0, kwokNodes: 7, kwokGpusPerNode: 8 })
  }, { timeout: 180_000 })

  after(async () => { await cluster?.stop() })

  it('runs 50 one-GPU pods on kwok nodes', async () => {
    const apps = cluster.kc.makeApiClient(AppsV1Api)
    const core = cluster.kc.makeApiClient(CoreV1Api)
    await apps.createNamespacedDeployment({
      namespace: 'default',
      body: {
        metadata: { name: 'scale' },
        spec: {
          replicas: 50,
          selector: { matchLabels: { app: 'scale' } },
          template: {
            metadata: { labels: { app: 'scale' } },
            spec: {
              tolerations: [{ key: GPU_RESOURCE, operator: 'Exists', effect: 'NoSchedule' }],
              containers: [{ name: 'c', image: 'averaging-swarm/agent:test', resources: { limits: { [GPU_RESOURCE]: '1' } } }]
            }
          }
        }
      }
    })
    const pods = await waitFor('50 Running pods', async () => {
      const items = (await core.listNamespacedPod({ namespace: 'default', labelSelector: 'app=scale' })).items
      const running = items.filter((p) => p.status?.phase === 'Running')
      return running.length === 50 ? running : undefined
    }, 120_000, 500)
    assert.ok(pods.every((p) => cluster.kwokNodeNames.includes(p.spec?.nodeName ?? '')))
    // 7 nodes x 8 GPUs = 56: the scheduler must have spread them, never past a node's GPUs.
    const perNode = new Map<string, number>()
    for (const p of pods) perNode.set(p.spec?.nodeName ?? '', (perNode.get(p.spec?.nodeName ?? '') ?? 0) + 1)
    assert.ok([...perNode.values()].every((n) => n <= 8))
  })

  it('resolves a Service of 50 ready pods to all 50 addresses (answers beyond 512 bytes)', async () => {
    const core = cluster.kc.makeApiClient(CoreV1Api)
    // The DNS server answers with the pods whose Ready condition is True at query time. The test
    // above waits for Running only; a clean-clone CI run once resolved 49 distinct addresses of 50.
    const ready = await waitFor('50 Ready pods', async () => {
      const items = (await core.listNamespacedPod({ namespace: 'default', labelSelector: 'app=scale' })).items
      const ready = items.filter((p) => p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true)
      return ready.length === 50 ? ready : undefined
    }, 60_000, 250)
    const podIps = ready.map((p) => p.status?.podIP ?? '').sort()
    assert.equal(new Set(podIps).size, 50, `kwok gave the 50 pods ${new Set(podIps).size} distinct IPs: ${podIps.join(' ')}`)
    await core.createNamespacedService({ namespace: 'default', body: { metadata: { name: 'scale' }, spec: { clusterIP: 'None', selector: { app: 'scale' }, ports: [{ port: 80 }] } } })
    const resolver = new Resolver()
    resolver.setServers([cluster.dnsAddress])
    const addresses = await resolver.resolve4('scale.default.svc.cluster.local')
    assert.deepEqual([...addresses].sort(), podIps)
  })
})
