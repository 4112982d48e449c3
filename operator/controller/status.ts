/**
 * Status derived from what is observed: pods (not StatefulSet counters, which call a pod
 * "ready" before the swarm can use it), StatefulSet rollout state, and averaging progress read
 * from the agents. Pure: same observations, same status, so an unchanged swarm writes nothing.
 */
import type { AveragingSwarm, AveragingSwarmStatus, Phase } from '../../api/v1alpha1/types.js'
import { agentSelectorString, LABEL_ROLE } from '../builders/names.js'
import type { KubeObj } from '../objects.js'
import { toCondition, type ConditionInput } from './conditions.js'
import { stoppedAfterFinish } from '../builders/statefulset.js'
import { checkpointsFailingCondition, checkpointStatus, completeCondition, completionTimeOf, type StoreProblem } from './completion.js'
import { failedCondition, failureTimeOf, restartsOf } from './failure.js'

export interface Progress {
  roundsCompleted: number
  meanGroupSize?: number
  lastRoundTime?: string
  /** The newest checkpoint an agent reported durable. */
  checkpoint?: { round: number, time: string }
  /** Ready agents seen reporting averaging_completed 1, of the Ready agents now (checkpoint-progress.ts). */
  completion?: { completed: number, of: number }
  /** A checkpoint write failed and no newer checkpoint is durable since; absent until a scrape tells. */
  checkpointFailing?: boolean
  /** Failed writes seen since the operator started. */
  checkpointFailures?: number
  /** Checkpoints restoring agents skipped as torn or corrupt, seen since the operator started. */
  checkpointsSkipped?: number
}

export interface Observed {
  statefulSets: KubeObj[]
  pods: KubeObj[]
  progress?: Progress
  bootstrapPeers: string[]
  /** A sentence describing why the last apply failed, if it did. */
  reconcileError?: string
  /** The checkpoint store is missing (the claim, the S3 Secret or its keys). */
  checkpointProblem?: StoreProblem
}

const STUCK_REASONS = new Set(['CrashLoopBackOff', 'ImagePullBackOff', 'ErrImagePull', 'CreateContainerConfigError', 'CreateContainerError', 'InvalidImageName', 'RunContainerError'])

interface PodView { name: string, role: string, ready: boolean, terminating: boolean, problem?: string, unschedulable?: string, exit?: string }

/** Longest exit line a condition message carries (the agent's own lines are far shorter). */
const MAX_EXIT_LINE = 300

/**
 * Why a pod's agent last exited: the last line of its termination message, which the kubelet
 * fills from the container's log tail (terminationMessagePolicy FallbackToLogsOnError) and the
 * agent ends with one clean line ("agent configuration is invalid: ..."). Stack frames and
 * Node's version banner are skipped, so an uncaught error shows its message.
 */
export function exitLine (message: unknown): string | undefined {
  if (typeof message !== 'string') return undefined
  const lines = message.split('\n').map(l => l.trim()).filter(l => l !== '' && !/^at\s.*:\d+:\d+\)?$/.test(l) && !/^Node\.js v\d/.test(l) && l !== '^')
  const last = lines.at(-1)
  if (last === undefined) return undefined
  return last.length > MAX_EXIT_LINE ? `${last.slice(0, MAX_EXIT_LINE - 1)}…` : last
}

/** The exit line of a pod's agent (the container named agent, else any that exited with one). */
function podExit (statuses: any[]): string | undefined {
  const ordered = [...statuses.filter(cs => cs.name === 'agent'), ...statuses.filter(cs => cs.name !== 'agent')]
  for (const cs of ordered) {
    const t = cs.state?.terminated ?? cs.lastState?.terminated
    const line = t !== undefined && t.exitCode !== 0 ? exitLine(t.message) : undefined
    if (line !== undefined) return line
  }
  return undefined
}

function viewPod (p: any): PodView {
  const conds: any[] = p.status?.conditions ?? []
  const ready = conds.some(c => c.type === 'Ready' && c.status === 'True')
  const sched = conds.find(c => c.type === 'PodScheduled' && c.status === 'False' && c.reason === 'Unschedulable')
  let problem: string | undefined
  if (p.status?.phase === 'Failed') problem = p.status?.reason ?? 'Failed'
  for (const cs of [...(p.status?.initContainerStatuses ?? []), ...(p.status?.containerStatuses ?? [])]) {
    const reason = cs.state?.waiting?.reason
    if (reason !== undefined && STUCK_REASONS.has(reason)) problem = reason
  }
  const exit = problem !== undefined ? podExit(p.status?.containerStatuses ?? []) : undefined
  return { name: p.metadata.name, role: p.metadata.labels?.[LABEL_ROLE] ?? '', ready, terminating: p.metadata.deletionTimestamp != null, problem, unschedulable: sched?.message, exit }
}

/** Why failing agents exit, one entry per distinct line, with the first pod that showed it. */
export interface AgentExit { pod: string, line: string }

export function agentExits (pods: KubeObj[]): AgentExit[] {
  const out: AgentExit[] = []
  for (const p of pods.map(viewPod)) {
    if (p.terminating || p.exit === undefined || out.some(e => e.line === p.exit)) continue
    out.push({ pod: p.name, line: p.exit })
  }
  return out
}

/** "demo-agent-2 exits: <line>", as the Degraded message and the AgentExits event say it. */
export const exitSentence = (e: AgentExit): string => `${e.pod} exits: ${e.line}`

function rolling (sets: KubeObj[]): boolean {
  return sets.some((s: any) => {
    const st = s.status ?? {}
    const want = s.spec?.replicas ?? 0
    return (st.observedGeneration ?? 0) < (s.metadata.generation ?? 0) || (st.updatedReplicas ?? 0) < want ||
      (want > 0 && st.currentRevision !== undefined && st.updateRevision !== undefined && st.currentRevision !== st.updateRevision)
  })
}

/** Up to two distinct exit lines, each its own sentence after the list of failing agents. */
function exitsText (exits: AgentExit[]): string {
  if (exits.length === 0) return ''
  const shown = exits.slice(0, 2).map(e => ` ${exitSentence(e)}${/[.!?…]$/.test(e.line) ? '' : '.'}`).join('')
  return exits.length > 2 ? `${shown} (${exits.length - 2} more exit reasons)` : shown
}

function list (names: string[]): string {
  return names.length <= 3 ? names.join(', ') : `${names.slice(0, 3).join(', ')} and ${names.length - 3} more`
}

/**
 * The agents of a finished swarm are stopped: every StatefulSet at 0 replicas and no pod left that
 * is not terminating (one stuck on a lost node does not hold the swarm's end back), or Complete or
 * Failed was already written True, which stays so whatever the objects do after.
 */
function agentsStopped (s: AveragingSwarm, o: Observed, livePods: number): boolean {
  if (s.status?.conditions?.some(c => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True') === true) return true
  return livePods === 0 && o.statefulSets.every((x: any) => (x.spec?.replicas ?? 0) === 0)
}

export function deriveStatus (s: AveragingSwarm, o: Observed, now: string): AveragingSwarmStatus {
  const pods = o.pods.map(viewPod)
  const live = pods.filter(p => !p.terminating)
  const agents = live.filter(p => p.role === 'agent' || p.role === 'bootstrap')
  const aux = live.filter(p => p.role === 'auxiliary')
  const restarts = restartsOf(o.pods)
  const completionTime = completionTimeOf(s, o.progress, now)
  const failureTime = failureTimeOf(s, restarts, completionTime, now)
  // Suspended, Failed, or Complete with podPolicy Delete: every agent is to be scaled to zero. The
  // objects follow the written status (the reconcile after the one that writes completionTime or
  // failureTime scales them), so Complete and Failed turn True, and the phase final, only once
  // the agents are stopped, as a Job's terminal conditions wait for its pods (Kubernetes 1.31):
  // whoever waits for Complete finds the GPUs being given back, not a run still holding them.
  const finished = stoppedAfterFinish({ ...s, status: { ...s.status, completionTime, failureTime } })
  const stopping = finished && !agentsStopped(s, o, live.length)
  const wantNone = s.spec.suspend || finished
  const desired = wantNone ? 0 : s.spec.replicas
  const auxDesired = wantNone ? 0 : s.spec.auxiliary.replicas
  const ready = agents.filter(p => p.ready).length
  const auxReady = aux.filter(p => p.ready).length
  const failing = live.filter(p => p.problem !== undefined)
  const unschedulable = live.filter(p => p.unschedulable !== undefined)
  const isRolling = rolling(o.statefulSets)
  const settled = agents.length === desired && ready === desired && aux.length === auxDesired && auxReady === auxDesired &&
    !isRolling && pods.length === live.length

  const degraded: ConditionInput = o.reconcileError !== undefined
    ? { type: 'Degraded', status: 'True', reason: 'ReconcileFailed', message: o.reconcileError }
    : failing.length > 0
      ? { type: 'Degraded', status: 'True', reason: 'AgentsFailing', message: `${failing.length} agent(s) cannot run: ${list(failing.map(p => `${p.name} (${p.problem})`))}.${exitsText(agentExits(o.pods))}` }
      : unschedulable.length > 0
        ? { type: 'Degraded', status: 'True', reason: 'AgentsUnschedulable', message: `${unschedulable.length} agent(s) cannot be scheduled: ${unschedulable[0].unschedulable}` }
        : { type: 'Degraded', status: 'False', reason: 'AsExpected', message: 'No agent is failing.' }

  let progressing: ConditionInput
  if (settled) progressing = { type: 'Progressing', status: 'False', reason: 'Complete', message: wantNone ? 'All agents are stopped.' : `All ${desired} agents run the current spec.` }
  else if (isRolling) progressing = { type: 'Progressing', status: 'True', reason: 'RollingUpdate', message: 'Agents are being replaced with the current spec.' }
  else if (agents.length < desired) progressing = { type: 'Progressing', status: 'True', reason: 'ScalingUp', message: `${agents.length} of ${desired} agents exist.` }
  else if (agents.length > desired || pods.length > live.length) progressing = { type: 'Progressing', status: 'True', reason: 'ScalingDown', message: `${live.length} agents, ${desired} wanted; extra agents are stopping.` }
  else progressing = { type: 'Progressing', status: 'True', reason: 'WaitingForReady', message: `${ready} of ${desired} agents are Ready.` }

  const rounds = o.progress?.roundsCompleted ?? s.status?.roundsCompleted
  const readyCond: ConditionInput = s.spec.suspend
    ? { type: 'Ready', status: 'False', reason: 'Suspended', message: 'The swarm is suspended.' }
    : finished && failureTime !== undefined
      ? { type: 'Ready', status: 'False', reason: 'Failed', message: `The run failed (spec.backoffLimit exceeded); its agents ${stopping ? 'are being' : 'are'} scaled to zero.` }
    : finished
      ? { type: 'Ready', status: 'False', reason: 'Completed', message: `The run is complete; its agents ${stopping ? 'are being' : 'are'} scaled to zero (completion.podPolicy Delete).` }
      : desired > 0 && ready === desired && auxReady === auxDesired
      ? { type: 'Ready', status: 'True', reason: 'AllAgentsReady', message: `${ready} of ${desired} agents are Ready${rounds !== undefined ? `; ${rounds} averaging rounds completed` : ''}.` }
      : { type: 'Ready', status: 'False', reason: desired === 0 ? 'NoAgentsWanted' : 'AgentsNotReady', message: `${ready} of ${desired} agents are Ready.` }

  const suspended: ConditionInput = s.spec.suspend
    ? { type: 'Suspended', status: 'True', reason: 'SuspendedBySpec', message: live.length === 0 ? 'spec.suspend is true; no agent runs.' : `spec.suspend is true; ${live.length} agent(s) still stopping.` }
    : { type: 'Suspended', status: 'False', reason: 'NotSuspended', message: 'spec.suspend is false.' }

  const extra = [completeCondition(s, completionTime, o.progress, stopping), failedCondition(s, failureTime, restarts, stopping), checkpointsFailingCondition(s, o.progress, o.checkpointProblem)].filter(c => c !== undefined)

  let phase: Phase
  if (stopping) phase = 'Progressing' // the agents are being stopped (Progressing says ScalingDown)
  else if (completionTime !== undefined) phase = 'Succeeded' // final, as a Job's; Degraded still tells of a failing agent
  else if (failureTime !== undefined) phase = 'Failed' // final too
  else if (s.spec.suspend) phase = 'Suspended'
  else if (degraded.status === 'True') phase = 'Degraded'
  else if (readyCond.status === 'True') phase = 'Ready'
  else if (ready > 0 || isRolling) phase = 'Progressing'
  else phase = 'Pending'

  const gen = s.metadata.generation
  const prev = s.status?.conditions
  const status: AveragingSwarmStatus = {
    observedGeneration: gen,
    phase,
    replicas: agents.length,
    readyReplicas: ready,
    auxiliaryReplicas: aux.length,
    auxiliaryReadyReplicas: auxReady,
    selector: agentSelectorString(s),
    bootstrapPeers: o.bootstrapPeers,
    conditions: [readyCond, progressing, degraded, suspended, ...extra].map(c => toCondition(c, prev, gen, now))
  }
  if (rounds !== undefined) status.roundsCompleted = rounds
  const lastRound = o.progress?.lastRoundTime ?? s.status?.lastRoundTime
  if (lastRound !== undefined) status.lastRoundTime = lastRound
  const mean = o.progress?.meanGroupSize ?? s.status?.meanGroupSize
  if (mean !== undefined) status.meanGroupSize = Math.round(mean * 100) / 100
  const checkpoint = checkpointStatus(s, o.progress)
  if (checkpoint !== undefined) status.checkpoint = checkpoint
  if (completionTime !== undefined) status.completionTime = completionTime
  if (failureTime !== undefined) status.failureTime = failureTime
  return status
}
