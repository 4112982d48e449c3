/**
 * Faults a local swarm injects while it runs (`npm start -- FILE --faults kill,stop`): what a crashed agent
 * container or a stalled node does to the training. A kill is SIGKILL to one agent and a new process of it a
 * second later, as the kubelet restarts a crashed container in its pod: the pod's trainer keeps running (the
 * Python client waits for the agent and registers again). A stop is SIGSTOP for a few seconds, then SIGCONT.
 * Victims take turns in pod order, kinds in the order given, one fault every `everyMs` on a fixed clock.
 */
import type { AgentProcess } from '../../agent/process/agent-process.js'
import { UserError } from './user-error.js'

export type LocalFault = 'kill' | 'stop'
const KINDS: readonly LocalFault[] = ['kill', 'stop']

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
  if (kinds.length === 0 || unknown !== undefined) throw new UserError(`--faults takes a list of ${KINDS.join(' and ')} (e.g. kill,stop), got "${faults}"`)
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

  /** `sidecar`: the agents have trainers, which run on through their agent's faults. */
  constructor (private readonly agents: readonly AgentProcess[], private readonly plan: FaultPlan, private readonly sidecar: boolean, private readonly log: (line: string) => void) {}

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
    if (kind === 'kill') {
      this.expectedExits.add(agent)
      this.log(`fault: ${agent.name}'s agent killed (SIGKILL); a new process in ${this.plan.restartDelayMs / 1000} s${this.sidecar ? ', its trainer running on' : ''}`)
      agent.killAndWait().then(() => { this.later(this.plan.restartDelayMs, () => { if (!agent.running) agent.start() }) }, () => {})
    } else {
      this.log(`fault: ${agent.name}'s agent frozen (SIGSTOP) for ${this.plan.freezeMs / 1000} s`)
      agent.signal('SIGSTOP')
      this.later(this.plan.freezeMs, () => { try { agent.signal('SIGCONT') } catch { /* gone meanwhile */ } })
    }
  }
}
