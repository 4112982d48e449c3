import { test } from 'node:test'
import assert from 'node:assert/strict'
import { AGENT_ENV } from '../../../api/agent-env.js'
import { desiredFor, find, swarm } from './fixture.js'
import { newSwarmKey } from '../../../operator/builders/psk.js'

const ALLOWED_VOLUME_TYPES = ['configMap', 'csi', 'downwardAPI', 'emptyDir', 'ephemeral', 'persistentVolumeClaim', 'projected', 'secret']

/** The checks of Pod Security Standards "restricted" (v1.34) that a pod template can fail. */
function restrictedViolations (pod: any): string[] {
  const v: string[] = []
  const ps = pod.spec.securityContext ?? {}
  if (pod.spec.hostNetwork || pod.spec.hostPID || pod.spec.hostIPC) v.push('host namespaces')
  for (const vol of pod.spec.volumes ?? []) {
    const type = Object.keys(vol).find(k => k !== 'name')
    if (!ALLOWED_VOLUME_TYPES.includes(type ?? '')) v.push(`volume type ${type}`)
  }
  for (const c of pod.spec.containers) {
    const sc = c.securityContext ?? {}
    if (sc.privileged) v.push(`${c.name}: privileged`)
    if (sc.allowPrivilegeEscalation !== false) v.push(`${c.name}: allowPrivilegeEscalation`)
    if (!(sc.capabilities?.drop ?? []).includes('ALL')) v.push(`${c.name}: capabilities not dropped`)
    if ((sc.capabilities?.add ?? []).some((x: string) => x !== 'NET_BIND_SERVICE')) v.push(`${c.name}: capabilities added`)
    if (sc.runAsNonRoot !== true && ps.runAsNonRoot !== true) v.push(`${c.name}: runAsNonRoot`)
    if ((sc.runAsUser ?? ps.runAsUser) === 0) v.push(`${c.name}: runAsUser 0`)
    const seccomp = sc.seccompProfile?.type ?? ps.seccompProfile?.type
    if (seccomp !== 'RuntimeDefault' && seccomp !== 'Localhost') v.push(`${c.name}: seccomp`)
    for (const p of c.ports ?? []) if (p.hostPort) v.push(`${c.name}: hostPort`)
  }
  return v
}

const envOf = (c: any) => Object.fromEntries(c.env.map((e: any) => [e.name, e]))

test('every agent pod template passes Pod Security restricted, with /tmp writable on a read-only root', async () => {
  const s = swarm({
    auxiliary: { replicas: 1 }, workload: { type: 'sidecar', trainer: { image: 'trainer:1' } }, network: { privateNetworkSecret: { name: 'psk' } },
    checkpoint: { volume: { claimName: 'ckpt' } }, completion: { rounds: 100 }
  })
  for (const o of (await desiredFor(s)).objects.filter(o => o.kind === 'StatefulSet') as any[]) {
    const pod = o.spec.template
    assert.deepEqual(restrictedViolations(pod), [], o.metadata.name)
    assert.equal(pod.spec.securityContext.runAsUser, 65532)
    for (const c of pod.spec.containers) {
      assert.equal(c.securityContext.readOnlyRootFilesystem, true)
      assert.ok(c.volumeMounts.some((m: any) => m.mountPath === '/tmp'), `${c.name} has /tmp`)
    }
  }
  assert.deepEqual(restrictedViolations({ spec: { containers: [{ name: 'x' }] } }).length, 4, 'the checker itself rejects a bare container')
})

test('the agent environment uses only the contract\'s variables and fills every required one', async () => {
  const known = new Set(Object.values(AGENT_ENV).map(e => e.name))
  const required = Object.values(AGENT_ENV).filter(e => 'required' in e && e.required).map(e => e.name)
  const sections = swarm({ auxiliary: { replicas: 1 }, checkpoint: { volume: { claimName: 'ckpt' } }, completion: { rounds: 100 } })
  for (const o of [...(await desiredFor(swarm())).objects, ...(await desiredFor(sections)).objects].filter(o => o.kind === 'StatefulSet') as any[]) {
    const env = o.spec.template.spec.containers[0].env
    for (const e of env) assert.ok(known.has(e.name), `${e.name} is not in api/agent-env.ts`)
    for (const r of required) assert.ok(env.some((e: any) => e.name === r), `${o.metadata.name} lacks ${r}`)
    assert.equal(new Set(env.map((e: any) => e.name)).size, env.length, 'no variable twice')
    const byName = envOf(o.spec.template.spec.containers[0])
    assert.deepEqual(byName.AVS_POD_IP.valueFrom, { fieldRef: { fieldPath: 'status.podIP' } })
    assert.deepEqual(byName.AVS_POD_NAME.valueFrom, { fieldRef: { fieldPath: 'metadata.name' } })
    assert.deepEqual(byName.AVS_PREFIX.valueFrom, { configMapKeyRef: { name: 'demo-config', key: 'AVS_PREFIX' } })
  }
})

test('bootstrap agents get their own key and dial the other bootstrap agents; regular agents dial all of them plus external peers', async () => {
  const ext = '/dns4/other.example.com/tcp/31337/p2p/12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA'
  const d = await desiredFor(swarm({ bootstrap: { replicas: 2, peers: [ext] } }))
  const env = (name: string) => envOf(find(d.objects, 'StatefulSet', name).spec.template.spec.containers[0])
  assert.deepEqual(env('demo-bootstrap-1').AVS_IDENTITY_KEY.valueFrom, { secretKeyRef: { name: 'demo-identity', key: 'bootstrap-1' } })
  assert.equal(env('demo-agent').AVS_IDENTITY_KEY, undefined)
  assert.equal(env('demo-bootstrap-0').AVS_BOOTSTRAP_PEERS.value, `${d.bootstrapPeers[1]},${ext}`)
  assert.equal(env('demo-agent').AVS_BOOTSTRAP_PEERS.value, [...d.bootstrapPeers, ext].join(','))
  assert.equal(env('demo-agent').AVS_MODE.value, 'node')
})

test('probes hit /readyz and /healthz on the metrics port; ports are named', async () => {
  const c = find((await desiredFor(swarm())).objects, 'StatefulSet', 'demo-agent').spec.template.spec.containers[0]
  assert.deepEqual(c.readinessProbe.httpGet, { path: '/readyz', port: 'metrics' })
  assert.deepEqual(c.livenessProbe.httpGet, { path: '/healthz', port: 'metrics' })
  assert.deepEqual(c.ports.map((p: any) => [p.name, p.containerPort]), [['p2p', 31337], ['metrics', 9400]])
})

test('GPUs, node selector and affinity go to agents; auxiliary agents get none of them', async () => {
  const s = swarm({
    resources: { limits: { 'nvidia.com/gpu': 1, memory: '8Gi' } },
    nodeSelector: { gpu: 'true' },
    affinity: { nodeAffinity: {} },
    auxiliary: { replicas: 2, resources: { limits: { 'nvidia.com/gpu': 1, cpu: '2' } } }
  })
  const d = await desiredFor(s)
  const agent = find(d.objects, 'StatefulSet', 'demo-agent').spec.template.spec
  assert.deepEqual(agent.containers[0].resources, { limits: { 'nvidia.com/gpu': 1, memory: '8Gi' } })
  assert.deepEqual(agent.nodeSelector, { gpu: 'true' })
  const aux = find(d.objects, 'StatefulSet', 'demo-aux').spec.template.spec
  assert.deepEqual(aux.containers[0].resources, { limits: { cpu: '2' } })
  assert.equal(aux.nodeSelector, undefined)
  assert.equal(aux.affinity, undefined)
  assert.equal(envOf(aux.containers[0]).AVS_MODE.value, 'auxiliary')
})

test('pod template overrides add labels, annotations, env and containers but cannot replace the operator\'s', async () => {
  const s = swarm({
    podTemplate: {
      labels: { team: 'ml', 'averaging.swarm.io/swarm': 'evil' },
      annotations: { note: 'x' },
      env: [{ name: 'EXTRA', value: '1' }, { name: 'AVS_PREFIX', value: 'hijack' }],
      containers: [{ name: 'shipper', image: 'fluent-bit' }, { name: 'agent', image: 'evil' }],
      serviceAccountName: 'trainer-sa'
    }
  })
  const t = find((await desiredFor(s)).objects, 'StatefulSet', 'demo-agent').spec.template
  assert.equal(t.metadata.labels.team, 'ml')
  assert.equal(t.metadata.labels['averaging.swarm.io/swarm'], 'demo')
  assert.equal(t.metadata.annotations.note, 'x')
  const env = envOf(t.spec.containers[0])
  assert.equal(env.EXTRA.value, '1')
  assert.ok(env.AVS_PREFIX.valueFrom, 'the contract variable stays from the ConfigMap')
  assert.deepEqual(t.spec.containers.map((c: any) => c.name), ['agent', 'shipper'])
  assert.equal(t.spec.serviceAccountName, 'trainer-sa')
})

test('the sidecar workload adds the trainer container, both sides know the sidecar port', async () => {
  const s = swarm({ workload: { type: 'sidecar', sidecarPort: 9500, trainer: { image: 'trainer:1', args: ['--steps', '10'] } } })
  const t = find((await desiredFor(s)).objects, 'StatefulSet', 'demo-agent').spec.template
  const [agent, trainer] = t.spec.containers
  assert.equal(trainer.name, 'trainer')
  assert.equal(envOf(agent).AVS_SIDECAR_PORT.value, '9500')
  assert.equal(envOf(trainer).AVS_SIDECAR_PORT.value, '9500')
  assert.equal(envOf(agent).AVS_WORKLOAD.value, 'sidecar')
  assert.equal(trainer.terminationMessagePolicy, 'FallbackToLogsOnError', 'a crashing trainer says why in the swarm status')
})

test('a sidecar pod shares a memory-backed avs-shm folder between agent and trainer, named by AVS_SHM_DIR in both', async () => {
  const s = swarm({ workload: { type: 'sidecar', trainer: { image: 'trainer:1', env: [{ name: 'AVS_SHM_DIR', value: '/elsewhere' }] } } })
  const t = find((await desiredFor(s)).objects, 'StatefulSet', 'demo-agent').spec.template
  assert.deepEqual(t.spec.volumes.find((v: any) => v.name === 'avs-shm'), { name: 'avs-shm', emptyDir: { medium: 'Memory' } })
  for (const c of t.spec.containers) {
    assert.deepEqual(c.volumeMounts.find((m: any) => m.name === 'avs-shm'), { name: 'avs-shm', mountPath: '/var/run/avs/shm' }, c.name)
    assert.equal(envOf(c).AVS_SHM_DIR.value, '/var/run/avs/shm', `${String(c.name)}: the operator's folder wins over the user's env`)
    assert.equal(c.env.filter((e: any) => e.name === 'AVS_SHM_DIR').length, 1)
  }
  const builtin = find((await desiredFor(swarm({}))).objects, 'StatefulSet', 'demo-agent').spec.template
  assert.equal(builtin.spec.volumes.some((v: any) => v.name === 'avs-shm'), false, 'a builtin swarm has no trainer to share with')
  assert.equal(envOf(builtin.spec.containers[0]).AVS_SHM_DIR, undefined)
})

test('a private network mounts the PSK Secret and points AVS_PSK_FILE at it', async () => {
  const s = swarm({ network: { privateNetworkSecret: { name: 'psk', key: 'k' } } })
  const t = find((await desiredFor(s)).objects, 'StatefulSet', 'demo-agent').spec.template
  assert.deepEqual(t.spec.volumes.find((v: any) => v.name === 'psk').secret, { secretName: 'psk', items: [{ key: 'k', path: 'swarm.key' }] })
  assert.equal(envOf(t.spec.containers[0]).AVS_PSK_FILE.value, '/etc/averaging-swarm/psk/swarm.key')
  assert.match(newSwarmKey(), /^\/key\/swarm\/psk\/1\.0\.0\/\n\/base16\/\n[0-9a-f]{64}\n$/)
})

test('the pod\'s grace period reaches the agent as AVS_TERMINATION_GRACE_SECONDS; unset, neither is written (Kubernetes\' 30 s, the agent\'s default)', async () => {
  const set = find((await desiredFor(swarm({ podTemplate: { terminationGracePeriodSeconds: 12 } }))).objects, 'StatefulSet', 'demo-agent').spec.template
  assert.equal(set.spec.terminationGracePeriodSeconds, 12)
  assert.equal(envOf(set.spec.containers[0])[AGENT_ENV.terminationGrace.name].value, '12')
  const unset = find((await desiredFor(swarm({}))).objects, 'StatefulSet', 'demo-agent').spec.template
  assert.equal(unset.spec.terminationGracePeriodSeconds, undefined)
  assert.equal(envOf(unset.spec.containers[0])[AGENT_ENV.terminationGrace.name], undefined)
  assert.equal(AGENT_ENV.terminationGrace.default, '30')
})
