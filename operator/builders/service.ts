/**
 * The headless Service that gives every agent a DNS name (<pod>.<service>.<ns>.svc). Not-ready
 * addresses are published because agents become Ready only after they reach their peers.
 */
import type { V1Service } from '@kubernetes/client-node'
import type { AveragingSwarm } from '../../api/v1alpha1/types.js'
import { LABEL_SWARM, names } from './names.js'
import { ownedMeta } from './owner.js'

export function buildService (s: AveragingSwarm) {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: ownedMeta(s, names.service(s)),
    spec: {
      clusterIP: 'None',
      publishNotReadyAddresses: true,
      selector: { [LABEL_SWARM]: s.metadata.name },
      ports: [
        { name: 'p2p', port: s.spec.network.port, targetPort: 'p2p', protocol: 'TCP' },
        { name: 'metrics', port: s.spec.metrics.port, targetPort: 'metrics', protocol: 'TCP' }
      ]
    }
  } satisfies V1Service
}
