import { test } from 'node:test'
import assert from 'node:assert/strict'
import { multiaddr } from '@multiformats/multiaddr'
import { desiredFor, find, swarm } from './fixture.js'
import type { PartialSpec } from '../../../api/v1alpha1/defaults.js'
import type { KubeObj } from '../../../operator/objects.js'
import { hostComponent, nodeHosts, type ReachableInputs } from '../../../operator/builders/reachable.js'
import { peerIdOf } from '../../../operator/builders/identity.js'
import { validateSwarm } from '../../../api/v1alpha1/validate.js'
import { ANNOUNCE_HOST_PATTERN } from '../../../api/v1alpha1/expose-schema.js'

const exposed = (expose: NonNullable<PartialSpec['network']>['expose'], spec: PartialSpec = {}) =>
  swarm({ replicas: 3, bootstrap: { replicas: 1 }, ...spec, network: { expose } })

const pod = (name: string, nodeName?: string): KubeObj => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name }, spec: nodeName === undefined ? {} : { nodeName } })
const node = (name: string, addresses: Array<[string, string]>): KubeObj => ({ apiVersion: 'v1', kind: 'Node', metadata: { name }, status: { addresses: addresses.map(([type, address]) => ({ type, address })) } })
const svc = (name: string, extra: { nodePort?: number, dataNodePort?: number, ingress?: Array<{ ip?: string, hostname?: string }> }): KubeObj => ({
  apiVersion: 'v1', kind: 'Service', metadata: { name },
  spec: { ports: [{ name: 'p2p', port: 31337, ...(extra.nodePort === undefined ? {} : { nodePort: extra.nodePort }) }, { name: 'data', port: 31338, ...(extra.dataNodePort === undefined ? {} : { nodePort: extra.dataNodePort }) }] },
  status: { loadBalancer: { ingress: extra.ingress ?? [] } }
})
const byName = (objs: KubeObj[]) => new Map(objs.map(o => [o.metadata.name, o]))
const observed = (pods: KubeObj[], nodes: KubeObj[], services: KubeObj[] = []): ReachableInputs => ({ pods: byName(pods), nodes: byName(nodes), services: byName(services) })

const NODES = [
  node('gpu-a', [['InternalIP', '10.0.0.5'], ['ExternalIP', '203.0.113.7'], ['Hostname', 'gpu-a']]),
  node('gpu-b', [['InternalIP', '10.0.0.6'], ['Hostname', 'gpu-b']]),
  node('gpu-v6', [['InternalIP', 'fd00::6'], ['ExternalIP', '2001:db8::7']])
]
const PODS = [pod('demo-bootstrap-0-0', 'gpu-a'), pod('demo-agent-0', 'gpu-b'), pod('demo-agent-1', 'gpu-v6')]

function agentContainer (d: { objects: KubeObj[] }, set: string): any {
  return find(d.objects, 'StatefulSet', set).spec.template.spec.containers.find((c: any) => c.name === 'agent')
}
const envOf = (c: any, name: string) => c.env.find((e: any) => e.name === name)?.value

test('without expose (or with None) a swarm keeps exactly today\'s objects and pod templates', async () => {
  const plain = await desiredFor(swarm({ replicas: 3, bootstrap: { replicas: 1 } }))
  const none = await desiredFor(exposed({ type: 'None' }), { identityData: find(plain.objects, 'Secret', 'demo-identity').data })
  assert.deepEqual(none.objects.map(o => `${o.kind}/${o.metadata.name}`), plain.objects.map(o => `${o.kind}/${o.metadata.name}`))
  assert.deepEqual(find(none.objects, 'StatefulSet', 'demo-agent').spec.template, find(plain.objects, 'StatefulSet', 'demo-agent').spec.template)
  assert.match(none.bootstrapPeers[0], /^\/dns4\/demo-bootstrap-0-0\.demo-agents\.ml\.svc\.cluster\.local\/tcp\/31337\/p2p\//)
  const c = agentContainer(plain, 'demo-agent')
  assert.equal(envOf(c, 'AVS_DATA_PORT'), undefined, 'unexposed agents still pick a free data port')
  assert.equal(envOf(c, 'AVS_ANNOUNCE_FILE'), undefined)
})

test('HostPort: host ports on the libp2p and data ports, a fixed data port, the announce file; no Services', async () => {
  const d = await desiredFor(exposed({ type: 'HostPort' }), { observed: observed(PODS, NODES) })
  const c = agentContainer(d, 'demo-agent')
  assert.deepEqual(c.ports.map((p: any) => [p.name, p.containerPort, p.hostPort]), [['p2p', 31337, 31337], ['metrics', 9400, undefined], ['data', 31338, 31338]])
  assert.equal(envOf(c, 'AVS_DATA_PORT'), '31338')
  assert.equal(envOf(c, 'AVS_ANNOUNCE_FILE'), '/etc/averaging-swarm/announce/$(AVS_POD_NAME)')
  const tpl = find(d.objects, 'StatefulSet', 'demo-agent').spec.template.spec
  assert.deepEqual(tpl.volumes.find((v: any) => v.name === 'avs-announce'), { name: 'avs-announce', configMap: { name: 'demo-announce', optional: true } })
  assert.equal(d.objects.filter(o => o.kind === 'Service').length, 1, 'only the headless Service')
  // ExternalIP preferred; a node without one announces its InternalIP; IPv6 → /ip6.
  assert.deepEqual(find(d.objects, 'ConfigMap', 'demo-announce').data, {
    'demo-bootstrap-0-0': '/ip4/203.0.113.7/tcp/31337',
    'demo-agent-0': '/ip4/10.0.0.6/tcp/31337',
    'demo-agent-1': '/ip6/2001:db8::7/tcp/31337'
  })
  const id = peerIdOf(find(d.objects, 'Secret', 'demo-identity').data, 0)
  assert.deepEqual(d.bootstrapPeers, [`/ip4/203.0.113.7/tcp/31337/p2p/${id}`])
  for (const a of d.bootstrapPeers) multiaddr(a)
})

test('HostPort: a pod not scheduled yet has no address, and the status publishes none for it', async () => {
  const d = await desiredFor(exposed({ type: 'HostPort' }), { observed: observed([pod('demo-bootstrap-0-0')], NODES) })
  assert.deepEqual(find(d.objects, 'ConfigMap', 'demo-announce').data, {})
  assert.deepEqual(d.bootstrapPeers, [])
})

test('NodePort: one Service per agent (auxiliary too) selecting its pod; announce = its node + the allocated node ports (the data channel\'s as data=)', async () => {
  const s = exposed({ type: 'NodePort', service: { annotations: { team: 'ml' } } }, { auxiliary: { replicas: 1 } })
  const services = [svc('demo-bootstrap-0-0', { nodePort: 30001, dataNodePort: 30101 }), svc('demo-agent-0', { nodePort: 30002 }), svc('demo-agent-1', { dataNodePort: 30103 })]
  const d = await desiredFor(s, { observed: observed(PODS, NODES, services) })
  const names = d.objects.filter(o => o.kind === 'Service').map(o => o.metadata.name)
  assert.deepEqual(names, ['demo-agents', 'demo-bootstrap-0-0', 'demo-agent-0', 'demo-agent-1', 'demo-aux-0'])
  const b = find(d.objects, 'Service', 'demo-bootstrap-0-0')
  assert.equal(b.spec.type, 'NodePort')
  assert.deepEqual(b.spec.selector, { 'statefulset.kubernetes.io/pod-name': 'demo-bootstrap-0-0' })
  assert.equal(b.spec.publishNotReadyAddresses, true)
  assert.deepEqual(b.spec.ports.map((p: any) => [p.name, p.port, p.targetPort, p.nodePort]), [['p2p', 31337, 31337, undefined], ['data', 31338, 31338, undefined]], 'node ports are the API server\'s to allocate')
  assert.equal(b.metadata.annotations.team, 'ml')
  assert.equal(b.spec.externalTrafficPolicy, 'Cluster')
  assert.equal(agentContainer(d, 'demo-agent').ports[0].hostPort, undefined)
  assert.deepEqual(find(d.objects, 'ConfigMap', 'demo-announce').data, {
    'demo-bootstrap-0-0': '/ip4/203.0.113.7/tcp/30001,data=/ip4/203.0.113.7/tcp/30101',
    'demo-agent-0': '/ip4/10.0.0.6/tcp/30002'
  }, 'demo-agent-0 has no data node port yet, demo-agent-1 no libp2p one, demo-aux-0 no pod')
  assert.deepEqual(d.bootstrapPeers.map(p => p.replace(/\/p2p\/.*/, '')), ['/ip4/203.0.113.7/tcp/30001'], 'the data port is no bootstrap address')
})

test('LoadBalancer: LoadBalancer Services for bootstrap agents, NodePort for the others; ingress IP, host name (/dns4) or pending', async () => {
  const spec = { type: 'LoadBalancer' as const, service: { loadBalancerClass: 'service.k8s.aws/nlb', externalTrafficPolicy: 'Local' as const } }
  const s = swarm({ replicas: 4, bootstrap: { replicas: 2 }, network: { expose: spec } })
  const pods = [pod('demo-bootstrap-0-0', 'gpu-a'), pod('demo-bootstrap-1-0', 'gpu-b'), pod('demo-agent-0', 'gpu-b')]
  const services = [svc('demo-bootstrap-0-0', { ingress: [{ hostname: 'abc.elb.us-east-1.amazonaws.com' }] }), svc('demo-bootstrap-1-0', {}), svc('demo-agent-0', { nodePort: 31000 })]
  const d = await desiredFor(s, { observed: observed(pods, NODES, services) })
  const lb = find(d.objects, 'Service', 'demo-bootstrap-0-0')
  assert.equal(lb.spec.type, 'LoadBalancer')
  assert.equal(lb.spec.loadBalancerClass, 'service.k8s.aws/nlb')
  assert.equal(lb.spec.externalTrafficPolicy, 'Local')
  const np = find(d.objects, 'Service', 'demo-agent-0')
  assert.equal(np.spec.type, 'NodePort')
  assert.equal(np.spec.loadBalancerClass, undefined, 'a NodePort Service may not carry a loadBalancerClass')
  assert.deepEqual(find(d.objects, 'ConfigMap', 'demo-announce').data, {
    'demo-bootstrap-0-0': '/dns4/abc.elb.us-east-1.amazonaws.com/tcp/31337',
    'demo-agent-0': '/ip4/10.0.0.6/tcp/31000'
  }, 'bootstrap 1 waits for its ingress')
  const id0 = peerIdOf(find(d.objects, 'Secret', 'demo-identity').data, 0)
  assert.deepEqual(d.bootstrapPeers, [`/dns4/abc.elb.us-east-1.amazonaws.com/tcp/31337/p2p/${id0}`])
  const ip = await desiredFor(s, { identityData: find(d.objects, 'Secret', 'demo-identity').data, observed: observed(pods, NODES, [svc('demo-bootstrap-0-0', { ingress: [{ ip: '198.51.100.9' }] })]) })
  assert.deepEqual(ip.bootstrapPeers, [`/ip4/198.51.100.9/tcp/31337/p2p/${id0}`])
})

test('announceHost replaces the derived host, keeps the exposed port, and still needs a scheduled pod for node ports', async () => {
  const d = await desiredFor(exposed({ type: 'HostPort', announceHost: 'gw.example.com' }), { observed: observed(PODS.slice(0, 1), NODES) })
  assert.deepEqual(find(d.objects, 'ConfigMap', 'demo-announce').data, { 'demo-bootstrap-0-0': '/dns4/gw.example.com/tcp/31337' })
  const lb = await desiredFor(exposed({ type: 'LoadBalancer', announceHost: '2001:db8::1' }), { observed: observed([], []) })
  assert.match(lb.bootstrapPeers[0], /^\/ip6\/2001:db8::1\/tcp\/31337\/p2p\//, 'a LoadBalancer with announceHost needs no ingress')
})

test('suspend: no per-agent Services, an empty announce ConfigMap and no published peers', async () => {
  const d = await desiredFor(exposed({ type: 'NodePort' }, { suspend: true }), { observed: observed(PODS, NODES) })
  assert.deepEqual(d.objects.filter(o => o.kind === 'Service').map(o => o.metadata.name), ['demo-agents'])
  assert.deepEqual(find(d.objects, 'ConfigMap', 'demo-announce').data, {})
  assert.deepEqual(d.bootstrapPeers, [])
})

test('every announceHost the CRD admits becomes a multiaddr the agent parses', () => {
  const re = new RegExp(ANNOUNCE_HOST_PATTERN)
  for (const h of ['gw.example.com', '203.0.113.7', '999.1.1.1', '2001:db8::7', '::1', 'fe80::1', 'localhost', 'a-b.c']) {
    assert.ok(re.test(h), h)
    multiaddr(`${hostComponent(h)}/tcp/31337`)
  }
  for (const h of ['gw.example.com:80', 'fe80:::1', '-a.com', 'a_b', '']) assert.ok(!re.test(h), h)
})

test('nodeHosts: every ExternalIP, else every InternalIP, never a Hostname', () => {
  assert.deepEqual(nodeHosts(node('n', [['InternalIP', '10.0.0.1'], ['ExternalIP', '203.0.113.1'], ['ExternalIP', '2001:db8::1']])), ['203.0.113.1', '2001:db8::1'])
  assert.deepEqual(nodeHosts(node('n', [['Hostname', 'n'], ['InternalIP', '10.0.0.1']])), ['10.0.0.1'])
  assert.deepEqual(nodeHosts(node('n', [['Hostname', 'n']])), [])
  assert.deepEqual(nodeHosts(undefined), [])
})

test('the local validator knows the CEL rule on the data port (with the server\'s defaults)', () => {
  const obj = (network: unknown) => ({ apiVersion: 'averaging.swarm.io/v1alpha1', kind: 'AveragingSwarm', metadata: { name: 'x' }, spec: { network } })
  assert.deepEqual(validateSwarm(obj({ expose: { type: 'HostPort' } })), [])
  assert.deepEqual(validateSwarm(obj({ port: 31338, expose: { type: 'HostPort' } })), ['spec.network.expose.dataPort: network.expose.dataPort must differ from network.port, metrics.port and workload.sidecarPort'])
})
