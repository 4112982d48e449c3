/** PodMonitor for the Prometheus Operator, built only when its CRDs exist and spec.metrics.podMonitor is true. */
import type { AveragingSwarm } from '../../api/v1alpha1/types.js'
import { LABEL_SWARM, names } from './names.js'
import { ownedMeta } from './owner.js'

export const POD_MONITOR_API = { group: 'monitoring.coreos.com', version: 'v1', plural: 'podmonitors' }

export function buildPodMonitor (s: AveragingSwarm) {
  return {
    apiVersion: `${POD_MONITOR_API.group}/${POD_MONITOR_API.version}`,
    kind: 'PodMonitor',
    metadata: ownedMeta(s, names.podMonitor(s)),
    spec: {
      selector: { matchLabels: { [LABEL_SWARM]: s.metadata.name } },
      podMetricsEndpoints: [{ port: 'metrics', path: '/metrics', interval: '15s' }]
    }
  }
}
