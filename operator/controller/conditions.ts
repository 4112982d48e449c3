/** metav1.Condition helpers: lastTransitionTime moves only when the status value changes. */
import type { Condition, ConditionStatus, ConditionType } from '../../api/v1alpha1/types.js'

export interface ConditionInput { type: ConditionType, status: ConditionStatus, reason: string, message: string }

export function toCondition (c: ConditionInput, previous: Condition[] | undefined, generation: number | undefined, now: string): Condition {
  const prev = previous?.find(p => p.type === c.type)
  return {
    ...c,
    lastTransitionTime: prev !== undefined && prev.status === c.status ? prev.lastTransitionTime : now,
    ...(generation === undefined ? {} : { observedGeneration: generation })
  }
}

export function conditionOf (conditions: Condition[] | undefined, type: ConditionType): Condition | undefined {
  return conditions?.find(c => c.type === type)
}
