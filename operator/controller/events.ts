/** Events worth a person's attention in kubectl describe, derived by comparing before and after. */
import type { AveragingSwarm, AveragingSwarmStatus } from '../../api/v1alpha1/types.js'
import type { EventInput } from '../kube/api.js'
import { conditionOf } from './conditions.js'

/** Events for a status transition (phase changes, Degraded reasons). */
export function statusEvents (s: AveragingSwarm, before: AveragingSwarmStatus | undefined, after: AveragingSwarmStatus): EventInput[] {
  const out: EventInput[] = []
  if (before?.phase !== after.phase) {
    const ready = conditionOf(after.conditions, 'Ready')
    const degraded = conditionOf(after.conditions, 'Degraded')
    switch (after.phase) {
      case 'Ready': out.push({ swarm: s, type: 'Normal', reason: 'SwarmReady', message: ready?.message ?? 'All agents are Ready.' }); break
      case 'Degraded': out.push({ swarm: s, type: 'Warning', reason: degraded?.reason ?? 'Degraded', message: degraded?.message ?? 'The swarm is degraded.' }); break
      case 'Suspended': out.push({ swarm: s, type: 'Normal', reason: 'Suspended', message: 'spec.suspend is true: every agent is scaled to zero.' }); break
      default: if (before?.phase === 'Suspended') out.push({ swarm: s, type: 'Normal', reason: 'Resumed', message: 'spec.suspend is false: agents are starting again.' })
    }
  }
  if ((after.roundsCompleted ?? 0) > 0 && (before?.roundsCompleted ?? 0) === 0) {
    out.push({ swarm: s, type: 'Normal', reason: 'AveragingStarted', message: `The agents completed their first averaging round${after.meanGroupSize === undefined ? '' : ` (mean group size ${after.meanGroupSize})`}.` })
  }
  return out
}
