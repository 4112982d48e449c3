/**
 * Phase Failed, as a Job's backoffLimit: once the restarts of the swarm's agent and trainer
 * containers, summed over its pods, exceed spec.backoffLimit, the operator writes
 * status.failureTime, and from then on Failed (with the message it wrote then) and phase
 * Failed are derived from that field alone (True once the agents are stopped: status.ts): sticky over the scale to zero, operator restarts and
 * spec edits, as Complete is. A completed run never fails afterwards, nor a failed one completes.
 * Pure.
 */
import type { AveragingSwarm } from '../../api/v1alpha1/types.js'
import type { KubeObj } from '../objects.js'
import { AGENT_CONTAINER, TRAINER_CONTAINER } from '../builders/pod-template.js'
import type { ConditionInput } from './conditions.js'
import { exitLine } from './status.js'

/** The swarm's restarts, and the container that restarted most (with its last exit line, if it left one). */
export interface Restarts {
  total: number
  worst?: { pod: string, container: string, restarts: number, line?: string }
}

/**
 * Restarts of the agent and trainer containers of these pods (the user's extra containers do not
 * count). A container whose last exit was 0 is not counted: a trainer that finished its work
 * (completion.onTrainerExit) is restarted by the pod's restartPolicy Always, which is no failure.
 */
export function restartsOf (pods: KubeObj[]): Restarts {
  let total = 0
  let worst: Restarts['worst']
  for (const p of pods as any[]) {
    for (const cs of p.status?.containerStatuses ?? []) {
      if (cs.name !== AGENT_CONTAINER && cs.name !== TRAINER_CONTAINER) continue
      const t = cs.lastState?.terminated ?? cs.state?.terminated
      if (t?.exitCode === 0) continue
      const n = Number(cs.restartCount ?? 0)
      total += n
      if (n > 0 && (worst === undefined || n > worst.restarts)) worst = { pod: p.metadata.name, container: cs.name, restarts: n, line: exitLine(t?.message) }
    }
  }
  return { total, ...(worst === undefined ? {} : { worst }) }
}

/** status.failureTime: kept once set; set now when the restarts exceed spec.backoffLimit (never after completion). */
export function failureTimeOf (s: AveragingSwarm, restarts: Restarts, completionTime: string | undefined, now: string): string | undefined {
  if (s.status?.failureTime !== undefined) return s.status.failureTime
  const limit = s.spec.backoffLimit
  return limit === undefined || completionTime !== undefined || restarts.total <= limit ? undefined : now
}

const SCALED = '; every agent is scaled to zero.'
const SCALING = '; every agent is being scaled to zero.'

function failedMessage (s: AveragingSwarm, r: Restarts): string {
  const w = r.worst
  const most = w === undefined ? '' : ` Most: container ${w.container} of ${w.pod} (${w.restarts} restarts)${w.line === undefined ? '' : `, last exit: ${w.line.replace(/[.!?…]$/, '')}`}.`
  return `${r.total} restarts of agent and trainer containers exceed spec.backoffLimit ${String(s.spec.backoffLimit)}${SCALED}${most}`
}

/**
 * Failed, only for a swarm with spec.backoffLimit or one that already failed. Between failureTime
 * and the agents' stop it is False, reason Stopping, with the message it will have.
 */
export function failedCondition (s: AveragingSwarm, failureTime: string | undefined, restarts: Restarts, stopping = false): ConditionInput | undefined {
  if (failureTime !== undefined) {
    // The message written when it failed: the pods it names are gone once scaled to zero.
    const prev = s.status?.failureTime !== undefined ? s.status.conditions?.find(c => c.type === 'Failed' && (c.status === 'True' || c.reason === 'Stopping')) : undefined
    const message = (prev?.message ?? failedMessage(s, restarts)).replace(SCALING, SCALED)
    return stopping
      ? { type: 'Failed', status: 'False', reason: 'Stopping', message: message.replace(SCALED, SCALING) }
      : { type: 'Failed', status: 'True', reason: 'BackoffLimitExceeded', message }
  }
  const limit = s.spec.backoffLimit
  if (limit === undefined) return undefined
  return { type: 'Failed', status: 'False', reason: 'BelowBackoffLimit', message: `${restarts.total} restarts of agent and trainer containers; the swarm fails beyond spec.backoffLimit ${limit}.` }
}
