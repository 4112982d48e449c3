/** Pod Events as the kubelet records them (Started, Killing, Unhealthy, BackOff, Failed, FailedMount), for `kubectl describe`. */
import { CoreV1Api, type KubeConfig, type V1Pod } from '@kubernetes/client-node'
import { rfc3339 } from '../time.js'

export type EventType = 'Normal' | 'Warning'
export type PodEventRecorder = (type: EventType, reason: string, message: string) => void

export function podEventRecorder (kc: KubeConfig, pod: () => V1Pod, log: (line: string) => void): PodEventRecorder {
  const core = kc.makeApiClient(CoreV1Api)
  let last = ''
  return (type, reason, message) => {
    // Retry loops (a missing Secret) would repeat the same event every few seconds: record it once.
    if (`${reason}:${message}` === last) return
    last = `${reason}:${message}`
    const p = pod()
    const namespace = p.metadata?.namespace ?? 'default'
    const now = rfc3339()
    void core.createNamespacedEvent({
      namespace,
      body: {
        metadata: { generateName: `${p.metadata?.name ?? 'pod'}.` },
        involvedObject: { apiVersion: 'v1', kind: 'Pod', namespace, name: p.metadata?.name, uid: p.metadata?.uid },
        type,
        reason,
        message,
        source: { component: 'kubelet', host: p.spec?.nodeName },
        reportingComponent: 'kubelet',
        reportingInstance: p.spec?.nodeName ?? '',
        firstTimestamp: now as unknown as Date,
        lastTimestamp: now as unknown as Date,
        count: 1
      }
    }).catch((error: Error) => { log(`event ${reason} for ${namespace}/${p.metadata?.name ?? ''} not recorded: ${error.message}`) })
  }
}
