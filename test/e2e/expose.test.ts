/**
 * spec.network.expose end to end, two swarms on one test cluster: one exposed with
 * HostPort, one with LoadBalancer (its bootstrap agent behind a load balancer, its regular agent
 * behind a NodePort Service). Each publishes its bootstrap agent's reachable address in
 * status.bootstrapPeers; an agent started by the test outside the cluster (plain
 * `node dist/agent/main.js` through agent/process/agent-process.ts, as on a laptop: its own address, no cluster DNS) joins through that
 * address alone and averages in groups with the swarm's agents. The test kubelet forwards host
 * ports, node ports and load-balancer addresses to the pods (tcp-forward.ts, service-proxy.ts)
 * and refreshes configMap volumes, so the agents' announce files fill in after they started.
 */
import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, readFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { controlPlaneBuilt, startCluster, waitFor, type Cluster } from '../harness/index.js'
import { RestClient } from '../../operator/kube/rest.js'
import { resourcePath } from '../../operator/kube/resources.js'
import { startOperator, type OperatorProcess } from '../operator/e2e/operator-process.js'
import { operatorKubeconfig } from './operator-identity.js'
import { peerIdOf } from '../../operator/builders/identity.js'
import { freePorts } from '../../agent/util/ports.js'
import { AgentProcess, agentEnv, stopAgents } from '../../agent/process/agent-process.js'
import { parsePrometheusText, sumOf } from '../../operator/controller/prom-text.js'

const NS = 'ml'
const HOST = 'hostport'
const LB = 'balanced'
const skip = !controlPlaneBuilt() ? 'the control plane is not built: run npm run cluster:build'
  : !existsSync('dist/agent-bundle/main.js') || !existsSync('dist/operator/main.js') ? 'the operator or the agent is not built' : false

describe('exposed swarms, joined from outside the cluster', { skip, timeout: 180_000 }, () => {
  let cluster: Cluster
  let rest: RestClient
  let op: OperatorProcess
  const laptops: AgentProcess[] = []
  const outside = new Map<string, Promise<{ peers: string[], laptop: Awaited<ReturnType<typeof startOutsideAgent>> }>>()

  before(async () => {
    // 4 GPUs a node: the LoadBalancer swarm's two agents may land on one node, and each HostPort agent still needs a GPU on its own node.
    cluster = await startCluster({ gpuNodes: 2, gpusPerNode: 4, cpuNodes: 0 })
    rest = new RestClient(cluster.kc)
    // HostPort is a Pod Security "baseline" violation: the namespace enforces nothing (README, "One swarm across clusters").
    await cluster.createNamespace(NS)
    const r = await cluster.kubectl('apply', '--server-side', '-f', 'crds/averagingswarm.yaml')
    assert.equal(r.code, 0, r.stderr)
    await waitFor('the CRD to be Established', async () => ((await rest.request('GET', resourcePath('CustomResourceDefinition', undefined, 'averagingswarms.averaging.swarm.io'))).status?.conditions ?? [])
      .some((c: { type: string, status: string }) => c.type === 'Established' && c.status === 'True'), 60_000)
    op = await startOperator(await operatorKubeconfig(cluster), cluster.logDir, 'operator')
    await waitFor('the operator to become ready', async () => await op.ready(), 60_000)
    // Both swarms start now, and an outside agent for each once its swarm publishes a bootstrap
    // address (2 cores: in parallel, not one after the other); the tests look at one each.
    await createSwarm(HOST, { type: 'HostPort' })
    await createSwarm(LB, { type: 'LoadBalancer', service: { annotations: { 'example.com/lb': 'test' } } })
    for (const swarm of [HOST, LB]) {
      const started = published(swarm).then(async peers => ({ peers, laptop: await startOutsideAgent(swarm, peers) }))
      started.catch(() => {}) // awaited by its test
      outside.set(swarm, started)
    }
  })

  after(async () => {
    await stopAgents(laptops, 2000)
    await op?.kill()
    await cluster?.stop()
  })

  test('HostPort: status.bootstrapPeers holds the node address and host port; an outside agent joins through it and averages with the swarm', async (t) => {
    const SWARM = HOST
    const pods = await waitFor('2 agents on 2 nodes', async () => {
      const p = (await rest.request('GET', resourcePath('Pod', NS), { query: { labelSelector: `averaging.swarm.io/swarm=${SWARM}` } })).items as any[]
      return p.length === 2 && p.every(x => x.status?.hostIP !== undefined) ? p : undefined
    }, 60_000, 300)
    assert.equal(new Set(pods.map(p => p.spec.nodeName)).size, 2, 'host ports keep two agents of a swarm off one node')
    const boot = pods.find(p => p.metadata.name === `${SWARM}-bootstrap-0-0`)
    const node = await rest.request('GET', resourcePath('Node', undefined, boot.spec.nodeName))
    const nodeIP = node.status.addresses.find((a: any) => a.type === 'InternalIP').address
    const id = peerIdOf((await rest.request('GET', resourcePath('Secret', NS, `${SWARM}-identity`))).data, 0)

    // The test cluster's nodes have no ExternalIP: the InternalIP is announced, with the host port.
    const { peers, laptop } = await outside.get(SWARM)!
    assert.deepEqual(peers, [`/ip4/${nodeIP}/tcp/31337/p2p/${id}`])
    assert.notEqual(nodeIP, boot.status.podIP, 'the node\'s address, not the pod\'s')

    // What the agents announce arrives after they started: the operator knew the node only once they were scheduled.
    const announce = await waitFor('each agent to announce its node address', async () => {
      const lines = agentLogLines(SWARM).filter(l => typeof l.msg === 'string' && l.msg.startsWith('announcing /ip4/'))
      return new Set(lines.map(l => l.pod)).size === 2 ? lines : undefined
    }, 60_000, 500)
    for (const p of pods) assert.ok(announce.some(l => l.pod === p.metadata.name && l.msg.startsWith(`announcing /ip4/${p.status.hostIP}/tcp/31337 `)), `${p.metadata.name as string} announces ${p.status.hostIP as string}`)

    await laptop.averaged()
    const direct = await laptop.metric('averaging_data_channels_total', { path: 'direct' })
    const fallback = await laptop.metric('averaging_data_channels_total', { path: 'libp2p' })
    t.diagnostic(`averaged ${((Date.now() - created) / 1000).toFixed(1)} s after the swarms were created; the outside agent opened ${direct} direct data channels and ${fallback} libp2p ones`)
    assert.ok(direct > 0, 'tensor parts reach the exposed agents on the direct data channel (node address:the fixed data port)')
  })

  test('LoadBalancer: the bootstrap agent at its load balancer\'s ingress, the regular agent at its node port; an outside agent joins and averages', async (t) => {
    const SWARM = LB
    const svc = await waitFor('the load balancer to get its ingress', async () => {
      const x = await rest.request('GET', resourcePath('Service', NS, `${SWARM}-bootstrap-0-0`))
      return x.status?.loadBalancer?.ingress?.[0]?.ip !== undefined ? x : undefined
    }, 60_000, 300)
    assert.equal(svc.spec.type, 'LoadBalancer')
    assert.deepEqual(svc.spec.selector, { 'statefulset.kubernetes.io/pod-name': `${SWARM}-bootstrap-0-0` })
    assert.equal(svc.metadata.annotations['example.com/lb'], 'test')
    const ingress = svc.status.loadBalancer.ingress[0].ip
    const np = await rest.request('GET', resourcePath('Service', NS, `${SWARM}-agent-0`))
    assert.equal(np.spec.type, 'NodePort')
    const nodePort = np.spec.ports.find((p: any) => p.name === 'p2p').nodePort
    const dataNodePort = np.spec.ports.find((p: any) => p.name === 'data').nodePort
    assert.ok(dataNodePort > 0 && dataNodePort !== nodePort, 'the data port has a node port of its own')
    const id = peerIdOf((await rest.request('GET', resourcePath('Secret', NS, `${SWARM}-identity`))).data, 0)
    const { peers, laptop } = await outside.get(SWARM)!
    assert.deepEqual(peers, [`/ip4/${ingress}/tcp/31337/p2p/${id}`])
    const agent = await rest.request('GET', resourcePath('Pod', NS, `${SWARM}-agent-0`))
    // Its data channel too: at the node port of its data port (outsiders would find nothing at the container's port on the node).
    await waitFor('the regular agent to announce its node address and node port, and its data channel\'s node port', async () => agentLogLines(SWARM)
      .some(l => l.pod === `${SWARM}-agent-0` && typeof l.msg === 'string' && l.msg.startsWith(`announcing /ip4/${agent.status.hostIP as string}/tcp/${nodePort as number} `) &&
        l.msg.endsWith(`our data channel at /ip4/${agent.status.hostIP as string}/tcp/${dataNodePort as number}`)), 60_000, 500)

    await laptop.averaged()
    t.diagnostic(`averaged ${((Date.now() - created) / 1000).toFixed(1)} s after the swarms were created; the outside agent opened ${await laptop.metric('averaging_data_channels_total', { path: 'direct' })} direct data channels and ${await laptop.metric('averaging_data_channels_total', { path: 'libp2p' })} libp2p ones`)
  })

  let created = 0
  /** status.bootstrapPeers once it lists an address. */
  async function published (swarm: string): Promise<string[]> {
    return await waitFor(`status.bootstrapPeers of ${swarm}`, async () => {
      const p = (await rest.request('GET', resourcePath('AveragingSwarm', NS, swarm))).status?.bootstrapPeers as string[] | undefined
      return p !== undefined && p.length > 0 ? p : undefined
    }, 60_000, 300)
  }

  async function createSwarm (name: string, expose: Record<string, unknown>): Promise<void> {
    created = Date.now()
    await rest.request('POST', resourcePath('AveragingSwarm', NS), {
      body: {
        apiVersion: 'averaging.swarm.io/v1alpha1', kind: 'AveragingSwarm', metadata: { name, namespace: NS },
        spec: {
          replicas: 2,
          resources: { limits: { 'nvidia.com/gpu': 1 } },
          tolerations: [{ key: 'nvidia.com/gpu', operator: 'Exists', effect: 'NoSchedule' }],
          averaging: { targetGroupSize: 3, minGroupSize: 2, averagingExpiration: '3s', requestTimeout: '1s', allreduceTimeout: '20s', period: '2s' },
          bootstrap: { replicas: 1 },
          network: { expose }
        }
      }
    })
  }

  /** The laptop: the swarm's averaging settings from its ConfigMap, the published addresses, nothing of the cluster's DNS. */
  async function startOutsideAgent (swarm: string, peers: string[]) {
    const config = (await rest.request('GET', resourcePath('ConfigMap', NS, `${swarm}-config`))).data as Record<string, string>
    const [p2pPort, metricsPort] = await freePorts(2)
    const agent = new AgentProcess({
      name: `laptop-${swarm}`,
      logDir: cluster.logDir,
      env: {
        ...config,
        ...agentEnv({ swarm, podName: `laptop-${swarm}`, podIP: '127.0.0.1', p2pPort, metricsPort, bootstrapPeers: peers.join(','), shardIndex: 200, logLevel: 'info' })
      }
    })
    agent.start()
    laptops.push(agent)
    return {
      metric: async (name: string, labels: Record<string, string> = {}) => {
        try { return sumOf(parsePrometheusText(await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`, { signal: AbortSignal.timeout(2000) })).text()), name, labels) ?? 0 } catch { return 0 }
      },
      averaged: async () => await waitFor(`the outside agent of ${swarm} to complete 2 rounds in groups of 3 with the swarm`, async () => {
        const groups = readFileSync(agent.logPath, 'utf8').split('\n').filter(l => l.startsWith('{')).map(l => JSON.parse(l)).filter(l => l.msg === 'averaged' && l.size === 3)
        return groups.length >= 2 ? groups : undefined
      }, 90_000, 500)
    }
  }

  /** JSON log lines of every agent pod of a swarm. */
  function agentLogLines (swarm: string): any[] {
    const root = join(cluster.dir, 'kubelet', 'logs')
    return readdirSync(root).filter(d => d.startsWith(`${NS}_${swarm}-`)).map(d => join(root, d, 'agent.log')).filter(f => existsSync(f))
      .flatMap(f => readFileSync(f, 'utf8').split('\n')).filter(l => l.startsWith('{')).map(l => { try { return JSON.parse(l) } catch { return {} } })
  }
})
