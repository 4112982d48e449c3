/**
 * StatefulSets of the agents. Each bootstrap agent has its own one-replica StatefulSet, because
 * each needs its own identity key (a StatefulSet's pods share one template); regular agents
 * share one StatefulSet, auxiliary agents another. Pods start in parallel: agents do not depend
 * on their ordinal neighbours, and a 1000-agent swarm should not start one pod at a time.
 */
import type { V1StatefulSet, V1StatefulSetSpec } from '@kubernetes/client-node'
import type { AveragingSwarm } from '../../api/v1alpha1/types.js'
import { LABEL_ROLE, names, roleSelector } from './names.js'
import { ownedMeta } from './owner.js'
import { buildPodTemplate, type PodInputs } from './pod-template.js'

/**
 * client-node's V1StatefulSet, but for the pod template: its containers and volumes include the
 * user's spec.podTemplate entries, which the schema keeps as free-form objects.
 */
type StatefulSetShape = Omit<V1StatefulSet, 'spec'> & { spec: Omit<V1StatefulSetSpec, 'template'> & { template: object } }

export function buildStatefulSet (s: AveragingSwarm, name: string, replicas: number, p: PodInputs) {
  return {
    apiVersion: 'apps/v1',
    kind: 'StatefulSet',
    metadata: ownedMeta(s, name, { [LABEL_ROLE]: p.role }),
    spec: {
      replicas,
      serviceName: names.service(s),
      podManagementPolicy: 'Parallel',
      revisionHistoryLimit: 3,
      selector: { matchLabels: roleSelector(s, p.role, p.bootstrapIndex) },
      updateStrategy: { type: 'RollingUpdate' },
      template: buildPodTemplate(s, p)
    }
  } satisfies StatefulSetShape
}

/**
 * Complete (status.completionTime, which the operator sets once and never clears) with
 * completion.podPolicy Delete: every agent is scaled to zero, the swarm and its status stay.
 */
export function stoppedAfterCompletion (s: AveragingSwarm): boolean {
  return s.status?.completionTime !== undefined && (s.spec.completion?.podPolicy ?? 'Delete') === 'Delete'
}

/** How many pods each role should run now (suspend, and completion with podPolicy Delete, scale everything to zero). */
export function roleReplicas (s: AveragingSwarm): { bootstrap: (i: number) => number, agent: number, auxiliary: number } {
  const on = !s.spec.suspend && !stoppedAfterCompletion(s)
  const b = s.spec.bootstrap.replicas
  return {
    bootstrap: (i: number) => on && i < s.spec.replicas ? 1 : 0,
    agent: on ? Math.max(0, s.spec.replicas - b) : 0,
    auxiliary: on ? s.spec.auxiliary.replicas : 0
  }
}
