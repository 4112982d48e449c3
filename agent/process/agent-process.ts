/**
 * The agent as a process seen from outside: how the local swarm (cli/), the benchmarks (bench/), the
 * fault-injection runs (tools/faults/) and the tests start the agent: the bundle the agent image runs
 * (dist/agent-bundle/main.js), or dist/agent/main.js as tsc leaves it where asked. One agent is configured by an
 * env record whose names come from the agent's env contract (api/agent-env.ts), never spelled here.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { createWriteStream, type WriteStream } from 'node:fs'
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import { fileURLToPath } from 'node:url'
import { AGENT_ENV, type AgentEnvKey } from '../../api/agent-env.js'

/** The agent's entry point (dist/agent/main.js). */
export const AGENT_MAIN = fileURLToPath(new URL('../main.js', import.meta.url))
/**
 * The same agent bundled into one file by `npm run build` (scripts/bundle-agent.mjs): what the agent image runs,
 * loaded in less than half the time (a restarted pod's way back into rounds).
 */
export const AGENT_BUNDLE = fileURLToPath(new URL('../../agent-bundle/main.js', import.meta.url))

/**
 * Where agents started here keep Node's compiled code (unless NODE_COMPILE_CACHE is set), as the
 * agent image keeps it in the pod's /tmp (Dockerfile.agent): a restarted agent then loads its ~1,060
 * modules without compiling them again, ~0.3 s of its way back into rounds on this 2-core machine
 * (1.4 → 1.1 s to its first line). The cache is keyed by each file's content, so a rebuilt
 * dist/ is never served stale code.
 */
const COMPILE_CACHE = join(tmpdir(), 'averaging-swarm-compile-cache')

/** Settings by their key in AGENT_ENV → the env record the agent reads (undefined values are left out). */
export function agentEnv (values: Partial<Record<AgentEnvKey, string | number | undefined>>): Record<string, string> {
  const env: Record<string, string> = {}
  for (const [key, value] of Object.entries(values) as Array<[AgentEnvKey, string | number | undefined]>) {
    if (value !== undefined) env[AGENT_ENV[key].name] = String(value)
  }
  return env
}

/** The command line that runs the agent, inside a network namespace (`ip netns exec`) when one is named. */
export function agentCommand (netns?: string, main: string = AGENT_BUNDLE): [string, string[]] {
  return netns !== undefined
    ? ['ip', ['netns', 'exec', netns, process.execPath, main]]
    : [process.execPath, [main]]
}

export interface AgentProcessOptions {
  /** The agent's name: its log is <logDir>/<name>.log. */
  readonly name: string
  /** Its settings (see agentEnv), over this process's own env. */
  readonly env: Record<string, string>
  readonly logDir: string
  /** A network namespace to run it in (`ip netns exec` execs node itself, so our pid is the agent's). */
  readonly netns?: string
  /** Called when an incarnation exits, with its exit code or signal. */
  readonly onExit?: (code: number | null, signal: NodeJS.Signals | null) => void
  /** The entry point: AGENT_BUNDLE (default), which the agent image runs, or AGENT_MAIN, as tsc leaves it. */
  readonly main?: string
}

/**
 * One agent as a real OS process (the image's bundle by default), optionally inside a network namespace. A
 * restart starts a new process with the same env, as a kubelet restarts a pod's container. Every
 * incarnation appends to the same log file, so "loaded the swarm state" lines can be counted.
 */
export class AgentProcess {
  private child: ChildProcess | undefined
  private exited: Promise<void> = Promise.resolve()
  private readonly log: WriteStream
  incarnation = 0
  stopped = false

  constructor (readonly options: AgentProcessOptions) {
    this.log = createWriteStream(this.logPath, { flags: 'a' })
  }

  get name (): string { return this.options.name }
  get logPath (): string { return join(this.options.logDir, `${this.options.name}.log`) }
  get pid (): number | undefined { return this.child?.pid }
  get running (): boolean { return this.child != null && this.child.exitCode === null && this.child.signalCode === null }

  start (): void {
    if (this.running) throw new Error(`agent ${this.name} is already running`)
    this.incarnation++
    const [cmd, args] = agentCommand(this.options.netns, this.options.main)
    const child = spawn(cmd, args, { env: { NODE_COMPILE_CACHE: COMPILE_CACHE, ...process.env, ...this.options.env }, stdio: ['ignore', 'pipe', 'pipe'] })
    this.log.write(`--- incarnation ${this.incarnation} (pid ${child.pid ?? '?'}) at ${new Date().toISOString()}\n`)
    child.stdout?.pipe(this.log, { end: false })
    child.stderr?.pipe(this.log, { end: false })
    this.exited = new Promise(resolve => {
      child.once('exit', (code, signal) => { resolve(); this.options.onExit?.(code, signal) })
    })
    this.child = child
    this.stopped = false
  }

  /** Sends a signal to the agent process (SIGKILL, SIGSTOP, SIGCONT, SIGTERM). */
  signal (sig: NodeJS.Signals): void {
    if (this.child?.pid === undefined || !this.running) throw new Error(`agent ${this.name} is not running`)
    process.kill(this.child.pid, sig)
    if (sig === 'SIGSTOP') this.stopped = true
    if (sig === 'SIGCONT') this.stopped = false
  }

  async killAndWait (): Promise<void> {
    if (this.running) this.signal('SIGKILL')
    await this.exited
  }

  /** SIGTERM (after SIGCONT, in case it is frozen), then SIGKILL if it has not left within graceMs. */
  async stop (graceMs = 10_000): Promise<void> {
    if (!this.running) return
    try { this.signal('SIGCONT') } catch { /* gone meanwhile */ }
    try { this.signal('SIGTERM') } catch { /* gone meanwhile */ }
    const timer = setTimeout(() => { if (this.running) this.signal('SIGKILL') }, graceMs)
    await this.exited
    clearTimeout(timer)
  }

  close (): void { this.log.end() }
}

/** Stops every agent, whatever state each is in, and closes their logs; never throws. */
export async function stopAgents (agents: readonly AgentProcess[], graceMs?: number): Promise<void> {
  await Promise.all(agents.map(async a => { await a.stop(graceMs).catch(() => {}); a.close() }))
}
