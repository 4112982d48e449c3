/**
 * Pure: the pod status the kubelet reports, from what its containers are doing. Conditions the
 * kubelet does not own (PodScheduled, DisruptionTarget, ...) are kept from the current object, and
 * a condition keeps its lastTransitionTime while its status does not change.
 */
import type { V1Pod, V1PodCondition, V1ContainerState } from '@kubernetes/client-node'

export interface ContainerRecord {
  readonly name: string
  readonly image: string
  readonly containerID?: string
  readonly state: V1ContainerState
  readonly lastState?: V1ContainerState
  readonly ready: boolean
  readonly started: boolean
  readonly restartCount: number
  /** True once the container has exited and will not be restarted. */
  readonly finished: boolean
  /** True once the container has ever run (so the pod is past Pending). */
  readonly everStarted: boolean
}

export interface PodRuntime {
  readonly podIP: string
  readonly hostIP: string
  readonly startTime: string
  readonly initContainers: readonly ContainerRecord[]
  readonly containers: readonly ContainerRecord[]
  /** Init containers all completed. */
  readonly initialized: boolean
  /** An init container failed for good (restartPolicy Never). */
  readonly initFailed: boolean
}

const OWNED = new Set(['PodReadyToStartContainers', 'Initialized', 'ContainersReady', 'Ready'])

export function podPhase (runtime: PodRuntime): string {
  if (runtime.initFailed) return 'Failed'
  const all = runtime.containers
  if (runtime.initialized && all.length > 0 && all.every((c) => c.finished)) {
    return all.every((c) => c.state.terminated?.exitCode === 0) ? 'Succeeded' : 'Failed'
  }
  if (runtime.initialized && all.some((c) => c.everStarted)) return 'Running'
  return 'Pending'
}

function containerStatus (record: ContainerRecord): Record<string, unknown> {
  return {
    name: record.name,
    image: record.image,
    imageID: `avs-process://${record.image}`,
    ...(record.containerID !== undefined ? { containerID: record.containerID } : {}),
    state: record.state,
    lastState: record.lastState ?? {},
    ready: record.ready,
    started: record.started,
    restartCount: record.restartCount
  }
}

export function podStatusPatch (pod: V1Pod, runtime: PodRuntime, now: string): Record<string, unknown> {
  const previous = new Map((pod.status?.conditions ?? []).map((c) => [c.type, c]))
  const condition = (type: string, ok: boolean, reason?: string): V1PodCondition => {
    const status = ok ? 'True' : 'False'
    const before = previous.get(type)
    const since = before?.status === status ? before.lastTransitionTime : now
    return { type, status, lastTransitionTime: since as unknown as Date, lastProbeTime: null as unknown as Date, ...(ok || reason === undefined ? {} : { reason }) }
  }
  const phase = podPhase(runtime)
  const containersReady = runtime.containers.length > 0 && runtime.containers.every((c) => c.ready)
  const done = phase === 'Succeeded' || phase === 'Failed'
  const notReadyReason = done ? 'PodCompleted' : 'ContainersNotReady'
  const conditions: V1PodCondition[] = [
    ...(pod.status?.conditions ?? []).filter((c) => !OWNED.has(c.type)),
    condition('PodReadyToStartContainers', !done),
    condition('Initialized', runtime.initialized || runtime.initFailed, 'ContainersNotInitialized'),
    condition('ContainersReady', containersReady && !done, notReadyReason),
    condition('Ready', containersReady && !done, notReadyReason)
  ]
  return {
    status: {
      phase,
      hostIP: runtime.hostIP,
      hostIPs: [{ ip: runtime.hostIP }],
      podIP: runtime.podIP,
      podIPs: [{ ip: runtime.podIP }],
      startTime: runtime.startTime,
      conditions,
      initContainerStatuses: runtime.initContainers.map(containerStatus),
      containerStatuses: runtime.containers.map(containerStatus)
    }
  }
}

/**
 * Types of the conditions this kubelet owns whose status on the API server differs from what it
 * would write now. The node lifecycle controller sets Ready=False on every pod of a node whose
 * heartbeats lapsed (e.g. while kube-apiserver was down); the real kubelet's status manager
 * notices the difference and writes its own status again, and so must this one.
 */
export function ownedConditionsDiffering (pod: V1Pod, runtime: PodRuntime): string[] {
  const want = (podStatusPatch(pod, runtime, '') as { status: { conditions: V1PodCondition[] } }).status.conditions
  const have = new Map((pod.status?.conditions ?? []).map((c) => [c.type, c.status]))
  return want.filter((c) => OWNED.has(c.type) && have.get(c.type) !== c.status).map((c) => c.type)
}
