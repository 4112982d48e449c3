/**
 * Proof that the test cluster is a real Kubernetes: the real scheduler places GPU pods on the
 * fake GPU nodes, the test kubelet really runs them (HTTP answers on the pod IP), the real
 * StatefulSet controller recreates a deleted pod, the scheduler explains an unschedulable pod,
 * and Pod Security admission rejects a privileged pod. One cluster serves the whole file.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { Resolver } from 'node:dns/promises'
import { AppsV1Api, CoreV1Api, type V1Pod, type V1StatefulSet } from '@kubernetes/client-node'
import { startCluster, controlPlaneBuilt, waitFor, binary, GPU_RESOURCE, type Cluster } from '../harness/index.js'

const notBuilt = controlPlaneBuilt() ? false : 'the control plane is not built: run `npm run cluster:build`'
const NS = 'proof'

function echoStatefulSet (name: string, replicas: number): V1StatefulSet {
  return {
    metadata: { name, namespace: NS },
    spec: {
      serviceName: name,
      replicas,
      podManagementPolicy: 'Parallel',
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name } },
        spec: {
          terminationGracePeriodSeconds: 5,
          tolerations: [{ key: GPU_RESOURCE, operator: 'Exists', effect: 'NoSchedule' }],
          containers: [{
            name: 'echo',
            image: 'averaging-swarm/http-echo:test',
            ports: [{ name: 'http', containerPort: 8080 }],
            env: [
              { name: 'POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
              { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
              { name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } }
            ],
            resources: { limits: { [GPU_RESOURCE]: '1' } },
            readinessProbe: { httpGet: { path: '/healthz', port: 'http' }, periodSeconds: 1 }
          }]
        }
      }
    }
  }
}

async function httpGet (url: string): Promise<string> {
  const response = await fetch(url, { signal: AbortSignal.timeout(2000) })
  return await response.text()
}

function podReady (pod: V1Pod): boolean {
  return pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true
}

describe('test cluster: real control plane, fake GPU nodes', { skip: notBuilt, timeout: 300_000 }, () => {
  let cluster: Cluster
  let core: CoreV1Api
  let apps: AppsV1Api

  before(async () => {
    cluster = await startCluster({ gpuNodes: 3, gpusPerNode: 1, cpuNodes: 1 })
    console.log(`# test cluster ready in ${cluster.startupMs} ms (start to ready nodes), dir ${cluster.dir}`)
    core = cluster.kc.makeApiClient(CoreV1Api)
    apps = cluster.kc.makeApiClient(AppsV1Api)
    await cluster.createNamespace(NS)
  }, { timeout: 180_000 })

  after(async () => { await cluster?.stop() })

  it('registers Ready GPU nodes that the real kubectl lists', async () => {
    const result = await cluster.kubectl('get', 'nodes', '-l', 'nvidia.com/gpu.present=true', '-o', 'name')
    assert.equal(result.code, 0, result.stderr)
    assert.deepEqual(result.stdout.trim().split('\n').sort(), ['node/gpu-node-0', 'node/gpu-node-1', 'node/gpu-node-2'])
    const node = await core.readNode({ name: 'gpu-node-0' })
    assert.equal(node.status?.allocatable?.[GPU_RESOURCE], '1')
    assert.ok(node.spec?.taints?.some((t) => t.key === GPU_RESOURCE && t.effect === 'NoSchedule'))
  })

  it('schedules a GPU StatefulSet onto GPU nodes, runs its pods and turns them Ready', async () => {
    await core.createNamespacedService({ namespace: NS, body: { metadata: { name: 'echo' }, spec: { clusterIP: 'None', selector: { app: 'echo' }, ports: [{ port: 8080 }] } } })
    await apps.createNamespacedStatefulSet({ namespace: NS, body: echoStatefulSet('echo', 2) })
    await waitFor('StatefulSet echo to have 2 ready replicas', async () =>
      (await apps.readNamespacedStatefulSet({ namespace: NS, name: 'echo' })).status?.readyReplicas === 2, 60_000)
    const pods = (await core.listNamespacedPod({ namespace: NS, labelSelector: 'app=echo' })).items
    const nodes = pods.map((p) => p.spec?.nodeName ?? '')
    assert.equal(new Set(nodes).size, 2, 'one GPU per node: the two pods must land on two nodes')
    for (const node of nodes) assert.match(node, /^gpu-node-/)
    for (const pod of pods) {
      const answer = JSON.parse(await httpGet(`http://${pod.status?.podIP ?? ''}:8080/`)) as { pod: string, ip: string }
      assert.equal(answer.pod, pod.metadata?.name)
      assert.equal(answer.ip, pod.status?.podIP)
    }
    // `kubectl logs` goes API server → the test kubelet's log endpoint on the node's address.
    const logs = await cluster.kubectl('logs', '-n', NS, 'echo-1')
    assert.equal(logs.code, 0, logs.stderr)
    assert.match(logs.stdout, /^http-echo listening on 127\.\d+\.\d+\.\d+:8080$/m)
  })

  it('resolves StatefulSet pod and Service names through the cluster DNS', async () => {
    const pod = await core.readNamespacedPod({ namespace: NS, name: 'echo-0' })
    const resolver = new Resolver()
    resolver.setServers([cluster.dnsAddress])
    assert.deepEqual(await resolver.resolve4(`echo-0.echo.${NS}.svc.cluster.local`), [pod.status?.podIP])
    assert.equal((await resolver.resolve4(`echo.${NS}.svc.cluster.local`)).length, 2)
    await assert.rejects(resolver.resolve4(`nobody.echo.${NS}.svc.cluster.local`), /ENOTFOUND/)
  })

  it('recreates a deleted pod through the real StatefulSet controller, and it runs again', async () => {
    const old = await core.readNamespacedPod({ namespace: NS, name: 'echo-0' })
    await core.deleteNamespacedPod({ namespace: NS, name: 'echo-0' })
    const fresh = await waitFor('echo-0 to come back as a new, Ready pod', async () => {
      const pod = await core.readNamespacedPod({ namespace: NS, name: 'echo-0' })
      return pod.metadata?.uid !== old.metadata?.uid && podReady(pod) ? pod : undefined
    }, 60_000)
    const answer = JSON.parse(await httpGet(`http://${fresh.status?.podIP ?? ''}:8080/`)) as { pod: string }
    assert.equal(answer.pod, 'echo-0')
    // Graceful deletion: the old process got SIGTERM (and exited) before the pod was removed.
    const oldLog = readFileSync(cluster.containerLogFile(NS, 'echo-0', 'echo', old.metadata?.uid) ?? '', 'utf8')
    assert.match(oldLog, /http-echo got SIGTERM/)
  })

  it('leaves a pod that wants more GPUs than any node has Pending, with the scheduler\'s reason', async () => {
    await core.createNamespacedPod({
      namespace: NS,
      body: {
        metadata: { name: 'greedy' },
        spec: {
          tolerations: [{ key: GPU_RESOURCE, operator: 'Exists', effect: 'NoSchedule' }],
          containers: [{ name: 'c', image: 'averaging-swarm/http-echo:test', resources: { limits: { [GPU_RESOURCE]: '4' } } }]
        }
      }
    })
    const condition = await waitFor('the scheduler to mark greedy Unschedulable', async () => {
      const pod = await core.readNamespacedPod({ namespace: NS, name: 'greedy' })
      return pod.status?.conditions?.find((c) => c.type === 'PodScheduled' && c.status === 'False')
    }, 30_000)
    assert.equal(condition.reason, 'Unschedulable')
    assert.match(condition.message ?? '', /Insufficient nvidia\.com\/gpu/)
    const pod = await core.readNamespacedPod({ namespace: NS, name: 'greedy' })
    assert.equal(pod.status?.phase, 'Pending')
    assert.equal(pod.spec?.nodeName, undefined)
  })

  it('rejects a privileged pod in a namespace that enforces Pod Security "restricted"', async () => {
    await cluster.createNamespace('restricted', { 'pod-security.kubernetes.io/enforce': 'restricted' })
    await assert.rejects(core.createNamespacedPod({
      namespace: 'restricted',
      body: { metadata: { name: 'root' }, spec: { containers: [{ name: 'c', image: 'averaging-swarm/http-echo:test', securityContext: { privileged: true } }] } }
    }), (error: { code?: number, body?: string }) => {
      assert.equal(error.code, 403)
      const status = JSON.parse(String(error.body)) as { message: string }
      assert.match(status.message, /violates PodSecurity "restricted:latest": privileged/)
      return true
    })
  })

  it('runs init containers first and passes Secret/ConfigMap values as env and mounted files, rewriting mount paths', async () => {
    await core.createNamespacedSecret({ namespace: NS, body: { metadata: { name: 'psk' }, stringData: { 'swarm.key': 'secret-psk-bytes' } } })
    await core.createNamespacedConfigMap({ namespace: NS, body: { metadata: { name: 'cfg' }, data: { prefix: 'demo-prefix' } } })
    await core.createNamespacedPod({
      namespace: NS,
      body: {
        metadata: { name: 'reader' },
        spec: {
          restartPolicy: 'Never',
          volumes: [{ name: 'psk', secret: { secretName: 'psk' } }, { name: 'work', emptyDir: {} }],
          initContainers: [{ name: 'init', image: 'busybox', command: ['sh', '-c', 'echo from-init > /work/x'], volumeMounts: [{ name: 'work', mountPath: '/work' }] }],
          containers: [{
            name: 'c',
            image: 'busybox',
            command: ['sh', '-c', 'echo "file=$(cat $PSK_FILE) env=$FROM_SECRET cm=$FROM_CM ip=$MY_IP dns=$AVS_DNS_SERVERS init=$(cat /work/x)"'],
            volumeMounts: [{ name: 'psk', mountPath: '/etc/avs/psk', readOnly: true }, { name: 'work', mountPath: '/work' }],
            env: [
              { name: 'PSK_FILE', value: '/etc/avs/psk/swarm.key' },
              { name: 'FROM_SECRET', valueFrom: { secretKeyRef: { name: 'psk', key: 'swarm.key' } } },
              { name: 'FROM_CM', valueFrom: { configMapKeyRef: { name: 'cfg', key: 'prefix' } } },
              { name: 'MY_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } }
            ]
          }]
        }
      }
    })
    const pod = await waitFor('pod reader to succeed', async () => {
      const p = await core.readNamespacedPod({ namespace: NS, name: 'reader' })
      return p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed' ? p : undefined
    }, 30_000)
    assert.equal(pod.status?.phase, 'Succeeded')
    const log = readFileSync(cluster.containerLogFile(NS, 'reader', 'c') ?? '', 'utf8')
    assert.match(log, new RegExp(`file=secret-psk-bytes env=secret-psk-bytes cm=demo-prefix ip=${(pod.status?.podIP ?? '').replace(/\./g, '\\.')} dns=${cluster.dnsAddress} init=from-init`))
  })

  it('gives a pod its ServiceAccount identity through KUBECONFIG', async () => {
    await core.createNamespacedPod({
      namespace: NS,
      body: {
        metadata: { name: 'whoami' },
        spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'kubectl', command: [binary('kubectl'), 'auth', 'whoami', '-o', 'jsonpath={.status.userInfo.username}'] }] }
      }
    })
    const pod = await waitFor('pod whoami to finish', async () => {
      const p = await core.readNamespacedPod({ namespace: NS, name: 'whoami' })
      return p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed' ? p : undefined
    }, 30_000)
    const log = readFileSync(cluster.containerLogFile(NS, 'whoami', 'c') ?? '', 'utf8')
    assert.equal(pod.status?.phase, 'Succeeded', log)
    assert.match(log, new RegExp(`system:serviceaccount:${NS}:default`))
  })

  it('backs off a crashing container (CrashLoopBackOff, lastState exit code, restartCount)', async () => {
    await core.createNamespacedPod({
      namespace: NS,
      body: { metadata: { name: 'crasher' }, spec: { containers: [{ name: 'c', image: 'busybox', command: ['sh', '-c', 'echo crashing; exit 3'] }] } }
    })
    const status = await waitFor('crasher to be in CrashLoopBackOff after a restart', async () => {
      const s = (await core.readNamespacedPod({ namespace: NS, name: 'crasher' })).status?.containerStatuses?.[0]
      return s !== undefined && s.restartCount >= 1 && s.state?.waiting?.reason === 'CrashLoopBackOff' ? s : undefined
    }, 30_000)
    assert.equal(status.lastState?.terminated?.exitCode, 3)
    const logs = await cluster.kubectl('logs', '-n', NS, 'crasher', '--previous')
    assert.equal(logs.stdout.trim(), 'crashing')
  })

  it('keeps a failed container\'s log tail as its termination message under FallbackToLogsOnError', async () => {
    await core.createNamespacedPod({
      namespace: NS,
      body: { metadata: { name: 'crasher-msg' }, spec: { containers: [{ name: 'c', image: 'busybox', terminationMessagePolicy: 'FallbackToLogsOnError', command: ['sh', '-c', 'echo starting; echo "config is invalid: x must be positive" >&2; exit 2'] }] } }
    })
    const status = await waitFor('crasher-msg to be in CrashLoopBackOff after a restart', async () => {
      const s = (await core.readNamespacedPod({ namespace: NS, name: 'crasher-msg' })).status?.containerStatuses?.[0]
      return s !== undefined && s.restartCount >= 1 && s.state?.waiting?.reason === 'CrashLoopBackOff' ? s : undefined
    }, 30_000)
    assert.equal(status.lastState?.terminated?.exitCode, 2)
    assert.equal(status.lastState?.terminated?.message?.trim(), 'starting\nconfig is invalid: x must be positive')
    // The default policy (File) reads no logs: the crasher above has no message.
    const plain = (await core.readNamespacedPod({ namespace: NS, name: 'crasher' })).status?.containerStatuses?.[0]
    assert.equal(plain?.lastState?.terminated?.message, undefined)
  })

  it('kills a container that ignores SIGTERM once the grace period is over, then removes the pod', async () => {
    await core.createNamespacedPod({
      namespace: NS,
      body: { metadata: { name: 'stubborn' }, spec: { terminationGracePeriodSeconds: 2, containers: [{ name: 'c', image: 'busybox', command: ['sh', '-c', 'trap "" TERM; echo up; sleep 1000'] }] } }
    })
    await waitFor('stubborn to run', async () => (await core.readNamespacedPod({ namespace: NS, name: 'stubborn' })).status?.phase === 'Running', 30_000)
    const started = Date.now()
    await core.deleteNamespacedPod({ namespace: NS, name: 'stubborn' })
    await waitFor('stubborn to be gone', async () => {
      try { await core.readNamespacedPod({ namespace: NS, name: 'stubborn' }); return false } catch (error) { return (error as { code?: number }).code === 404 }
    }, 30_000, 100)
    const elapsed = Date.now() - started
    assert.ok(elapsed >= 1900, `SIGKILL must wait for the 2 s grace period (took ${elapsed} ms)`)
    assert.ok(elapsed < 15_000, `the pod must go soon after the grace period (took ${elapsed} ms)`)
  })

  it('restarts a container whose liveness probe fails', async () => {
    await core.createNamespacedPod({
      namespace: NS,
      body: {
        metadata: { name: 'sickly' },
        spec: {
          terminationGracePeriodSeconds: 1,
          containers: [{
            name: 'echo',
            image: 'averaging-swarm/http-echo:test',
            env: [{ name: 'POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } }, { name: 'UNHEALTHY_AFTER_MS', value: '1000' }],
            livenessProbe: { httpGet: { path: '/healthz', port: 8080 }, periodSeconds: 1, failureThreshold: 1 }
          }]
        }
      }
    })
    const status = await waitFor('sickly to be restarted', async () => {
      const p = await core.readNamespacedPod({ namespace: NS, name: 'sickly' })
      const s = p.status?.containerStatuses?.[0]
      return s !== undefined && s.restartCount >= 1 ? s : undefined
    }, 45_000)
    assert.ok(status.lastState?.terminated !== undefined, 'the killed run is reported as lastState.terminated')
    const events = await waitFor('the kubelet\'s Unhealthy event', async () => {
      const items = (await core.listNamespacedEvent({ namespace: NS, fieldSelector: 'involvedObject.name=sickly' })).items
      return items.some((e) => e.reason === 'Unhealthy') ? items : undefined
    }, 10_000)
    assert.ok(events.some((e) => e.reason === 'Started' && e.source?.component === 'kubelet'))
  })
})
