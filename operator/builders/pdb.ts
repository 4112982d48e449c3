/**
 * PodDisruptionBudget of the agents: a drain may take at most a quarter of them at once, so the
 * swarm keeps averaging; bootstrap agents are covered too.
 */
import type { V1PodDisruptionBudget } from '@kubernetes/client-node'
import type { AveragingSwarm } from '../../api/v1alpha1/types.js'
import { LABEL_ROLE, LABEL_SWARM, names } from './names.js'
import { ownedMeta } from './owner.js'

export function buildPdb (s: AveragingSwarm) {
  return {
    apiVersion: 'policy/v1',
    kind: 'PodDisruptionBudget',
    metadata: ownedMeta(s, names.pdb(s)),
    spec: {
      maxUnavailable: '25%',
      selector: {
        matchLabels: { [LABEL_SWARM]: s.metadata.name },
        matchExpressions: [{ key: LABEL_ROLE, operator: 'In', values: ['agent', 'bootstrap'] }]
      }
    }
  } satisfies V1PodDisruptionBudget
}
