/**
 * Faults a local swarm injects while it runs (`npm start -- FILE --faults kill,stop,pod`): what a crashed agent
 * container, a stalled node or a lost pod does to the training. A kill is SIGKILL to one agent and a new process of
 * it a second later, as the kubelet restarts a crashed container in its pod: the pod's trainer keeps running (the
 * Python client waits for the agent and registers again). A stop is SIGSTOP for a few seconds, then SIGCONT. A pod
 * fault kills agent and trainer and starts both again a second later, as a StatefulSet recreates a lost pod (the
 * trainer starts over from the swarm's state; in a builtin swarm it is a kill).
 * Victims take turns in pod order, kinds in the order given, one fault every `everyMs` on a fixed clock.
 */
import type { AgentProcess } from '../../agent/process/agent-process.js'
import type { Trainers } from './trainers.js'
import { UserError } from './user-error.js'

export type LocalFault = 'kill' | 'stop' | 'pod'
const KINDS: readonly LocalFault[] = ['kill', 'stop', 'pod']

export interface FaultPlan {
  readonly kinds: readonly LocalFault[]
  readonly everyMs: number
  /** How long a killed agent stays down before its new process starts. */
  readonly restartDelayMs: number
  /** How long a stopped agent stays frozen. */
  readonly freezeMs: number
}

/** `--faults kill,stop --fault-every 15`: the plan, or one sentence naming what is wrong. */
export function parseFaultPlan (faults: string, everySeconds: string): FaultPlan {
  const kinds = faults.split(',').map(k => k.trim()).filter(k => k.length > 0)
  const unknown = kinds.find(k => !(KINDS as readonly string[]).includes(k))
  if (kinds.length === 0 || unknown !== undefined) throw new UserError(`--faults takes a list of kill, stop and pod (e.g. kill,stop), got "${faults}"`)
  const every = Number(everySeconds)
  if (!(every >= 2)) throw new UserError(`--fault-every must be at least 2 seconds, got "${everySeconds}"`)
  return { kinds: kinds as LocalFault[], everyMs: every * 1000, restartDelayMs: 1000, freezeMs: Math.min(5000, every * 1000 / 2) }
}

export interface InjectedFault { readonly kind: LocalFault, readonly pod: string, readonly at: number }

/** Runs a plan against the agents until stopped; tells the swarm's exit watch which exits it caused. */
export class FaultInjector {
  readonly injected: InjectedFault[] = []
  private readonly expectedExits = new Set<AgentProcess>()
  private readonly pending = new Set<NodeJS.Timeout>()
  private clock?: NodeJS.Timeout
  private turn = 0
  private stopped = false

  /** `trainers`: a sidecar swarm's, which run on through their agent's kills and freezes and die with their pod. */
  constructor (private readonly agents: readonly AgentProcess[], private readonly plan: FaultPlan, private readonly trainers: Trainers | undefined, private readonly log: (line: string) => void) {}

  start (): void {
    this.clock = setInterval(() => { this.next() }, this.plan.everyMs)
  }

  /** Whether this exit of `agent` is a kill of ours (then the agent comes back by itself). */
  tookExit (agent: AgentProcess): boolean {
    return this.expectedExits.delete(agent)
  }

  /** No more faults, restarts or thaws (the swarm's stop thaws a frozen agent before it asks it to leave). */
  stop (): void {
    this.stopped = true
    clearInterval(this.clock)
    for (const timer of this.pending) clearTimeout(timer)
    this.pending.clear()
  }

  private later (ms: number, fn: () => void): void {
    if (this.stopped) return
    const timer = setTimeout(() => { this.pending.delete(timer); fn() }, ms)
    this.pending.add(timer)
  }

  private next (): void {
    const kind = this.plan.kinds[this.turn % this.plan.kinds.length]
    const agent = this.agents[this.turn % this.agents.length]
    this.turn++
    if (this.stopped || !agent.running || agent.stopped) return
    this.injected.push({ kind, pod: agent.name, at: Date.now() })
    if (kind === 'kill' || kind === 'pod') {
      this.expectedExits.add(agent)
      const withTrainer = kind === 'pod' && this.trainers !== undefined
      this.log(withTrainer
        ? `fault: ${agent.name} lost (agent and trainer SIGKILLed); both start again in ${this.plan.restartDelayMs / 1000} s`
        : `fault: ${agent.name}'s agent killed (SIGKILL); a new process in ${this.plan.restartDelayMs / 1000} s${this.trainers !== undefined ? ', its trainer running on' : ''}`)
      const trainerGone = withTrainer ? this.trainers!.kill(agent.name) : Promise.resolve(false)
      // A trainer that had finished stays finished: only one killed here starts again.
      Promise.all([agent.killAndWait(), trainerGone]).then(([, trainerKilled]) => {
        this.later(this.plan.restartDelayMs, () => {
          if (!agent.running) agent.start()
          if (trainerKilled) this.trainers!.start(agent.name)
        })
      }, () => {})
    } else {
      this.log(`fault: ${agent.name}'s agent frozen (SIGSTOP) for ${this.plan.freezeMs / 1000} s`)
      agent.signal('SIGSTOP')
      this.later(this.plan.freezeMs, () => { try { agent.signal('SIGCONT') } catch { /* gone meanwhile */ } })
    }
  }
}
