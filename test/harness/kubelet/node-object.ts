/** Pure builders for the Node and Lease objects of a fake GPU node (what a GPU node pool shows). */
import type { V1Node, V1Lease, V1NodeCondition } from '@kubernetes/client-node'

export interface NodeShape {
  readonly name: string
  /** The node's InternalIP (a loopback address). */
  readonly address: string
  readonly gpus: number
  readonly cpu: string
  readonly memory: string
  readonly pods: number
  readonly labels?: Readonly<Record<string, string>>
  /** Adds the taint nvidia.com/gpu=present:NoSchedule when gpus > 0 (as GPU node pools do). */
  readonly gpuTaint: boolean
  readonly annotations?: Readonly<Record<string, string>>
  /** Port of the node's kubelet API (status.daemonEndpoints), where `kubectl logs` is served. */
  readonly kubeletPort?: number
}

export const GPU_RESOURCE = 'nvidia.com/gpu'

export function nodeLabels (shape: NodeShape): Record<string, string> {
  const gpuLabels: Record<string, string> = shape.gpus > 0
    ? {
        'nvidia.com/gpu.present': 'true',
        'nvidia.com/gpu.count': String(shape.gpus),
        'nvidia.com/gpu.product': 'AVS-Fake-GPU',
        'node.kubernetes.io/instance-type': `avs-test.gpu-${shape.gpus}x`
      }
    : { 'node.kubernetes.io/instance-type': 'avs-test.cpu' }
  return {
    'kubernetes.io/hostname': shape.name,
    'kubernetes.io/os': 'linux',
    'kubernetes.io/arch': 'amd64',
    'topology.kubernetes.io/region': 'local',
    'topology.kubernetes.io/zone': 'local-a',
    ...gpuLabels,
    ...shape.labels
  }
}

export function nodeConditions (now: string, ready: boolean): V1NodeCondition[] {
  const ok = (type: string, reason: string, message: string): V1NodeCondition =>
    ({ type, status: 'False', reason, message, lastHeartbeatTime: now as unknown as Date, lastTransitionTime: now as unknown as Date })
  return [
    ok('MemoryPressure', 'KubeletHasSufficientMemory', 'kubelet has sufficient memory available'),
    ok('DiskPressure', 'KubeletHasNoDiskPressure', 'kubelet has no disk pressure'),
    ok('PIDPressure', 'KubeletHasSufficientPID', 'kubelet has sufficient PID available'),
    {
      type: 'Ready',
      status: ready ? 'True' : 'False',
      reason: ready ? 'KubeletReady' : 'KubeletNotReady',
      message: ready ? 'averaging-swarm test kubelet is posting ready status' : 'test kubelet stopped',
      lastHeartbeatTime: now as unknown as Date,
      lastTransitionTime: now as unknown as Date
    }
  ]
}

export function nodeStatus (shape: NodeShape, now: string, ready = true): V1Node['status'] {
  const resources: Record<string, string> = {
    cpu: shape.cpu,
    memory: shape.memory,
    pods: String(shape.pods),
    'ephemeral-storage': '100Gi',
    ...(shape.gpus > 0 ? { [GPU_RESOURCE]: String(shape.gpus) } : {})
  }
  return {
    capacity: resources,
    allocatable: resources,
    conditions: nodeConditions(now, ready),
    addresses: [{ type: 'InternalIP', address: shape.address }, { type: 'Hostname', address: shape.name }],
    daemonEndpoints: { kubeletEndpoint: { Port: shape.kubeletPort ?? 10250 } },
    nodeInfo: {
      architecture: 'amd64',
      bootID: '',
      containerRuntimeVersion: 'avs-process://0.1.0',
      kernelVersion: '',
      kubeProxyVersion: '',
      kubeletVersion: 'v1.34.10',
      machineID: '',
      operatingSystem: 'linux',
      osImage: 'AveragingSwarm test kubelet (pods run as local processes)',
      systemUUID: ''
    }
  }
}

export function nodeObject (shape: NodeShape, now: string): V1Node {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: shape.name, labels: nodeLabels(shape), annotations: { ...shape.annotations } },
    spec: shape.gpus > 0 && shape.gpuTaint
      ? { taints: [{ key: GPU_RESOURCE, value: 'present', effect: 'NoSchedule' }] }
      : {},
    status: nodeStatus(shape, now)
  }
}

export const LEASE_NAMESPACE = 'kube-node-lease'
export const LEASE_DURATION_SECONDS = 40

export function leaseObject (nodeName: string, nodeUid: string, now: string): V1Lease {
  return {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: {
      name: nodeName,
      namespace: LEASE_NAMESPACE,
      ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: nodeName, uid: nodeUid }]
    },
    spec: { holderIdentity: nodeName, leaseDurationSeconds: LEASE_DURATION_SECONDS, renewTime: now as unknown as Date }
  }
}
