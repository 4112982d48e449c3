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
 * Finished for good, the agents scaled to zero while the swarm and its status stay: Complete
 * (status.completionTime, set once, never cleared) with completion.podPolicy Delete, or Failed
 * (status.failureTime, likewise) whatever the pod policy: a failed run's agents and trainers
 * would only crash-loop on the GPUs they hold, and their logs tell no more than the Failed
 * condition already does (Keep is about idle agents of a finished run, not crashing ones).
 */
export function stoppedAfterFinish (s: AveragingSwarm): boolean {
  if (s.status?.failureTime !== undefined) return true
  return s.status?.completionTime !== undefined && (s.spec.completion?.podPolicy ?? 'Delete') === 'Delete'
}

/** How many pods each role should run now (suspend, failure, and completion with podPolicy Delete, scale everything to zero). */
export function roleReplicas (s: AveragingSwarm): { bootstrap: (i: number) => number, agent: number, auxiliary: number } {
  const on = !s.spec.suspend && !stoppedAfterFinish(s)
  const b = s.spec.bootstrap.replicas
  return {
    bootstrap: (i: number) => on && i < s.spec.replicas ? 1 : 0,
    agent: on ? Math.max(0, s.spec.replicas - b) : 0,
    auxiliary: on ? s.spec.auxiliary.replicas : 0
  }
}
