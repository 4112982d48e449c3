import { spawn, type ChildProcess } from 'node:child_process'
import { createWriteStream, type WriteStream } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { SwarmAgent } from './sidecar-swarm.js'

export const AGENT_MAIN = fileURLToPath(new URL('../../agent/main.js', import.meta.url))

/**
 * One agent of a reliability run as a real OS process (dist/agent/main.js), optionally inside a
 * network namespace (`ip netns exec`, which execs node itself, so our pid is the agent's). A
 * restart starts a new process with the same env, as a kubelet restarts a pod's container. Every
 * incarnation appends to the same log file, so "loaded the swarm state" lines can be counted.
 */
export class AgentProcess {
  private child: ChildProcess | undefined
  private exited: Promise<void> = Promise.resolve()
  private readonly log: WriteStream
  incarnation = 0
  stopped = false

  constructor (readonly agent: SwarmAgent, readonly logDir: string, private readonly netns?: string) {
    this.log = createWriteStream(this.logPath, { flags: 'a' })
  }

  get logPath (): string { return join(this.logDir, `${this.agent.name}.log`) }
  get pid (): number | undefined { return this.child?.pid }
  get running (): boolean { return this.child != null && this.child.exitCode === null && this.child.signalCode === null }

  start (): void {
    if (this.running) throw new Error(`agent ${this.agent.name} is already running`)
    this.incarnation++
    const [cmd, args] = this.netns !== undefined
      ? ['ip', ['netns', 'exec', this.netns, process.execPath, AGENT_MAIN]]
      : [process.execPath, [AGENT_MAIN]]
    const child = spawn(cmd, args, { env: { ...process.env, ...this.agent.env }, stdio: ['ignore', 'pipe', 'pipe'] })
    this.log.write(`--- incarnation ${this.incarnation} (pid ${child.pid ?? '?'}) at ${new Date().toISOString()}\n`)
    child.stdout?.pipe(this.log, { end: false })
    child.stderr?.pipe(this.log, { end: false })
    this.exited = new Promise(resolve => { child.once('exit', () => { resolve() }) })
    this.child = child
    this.stopped = false
  }

  /** Sends a signal to the agent process (SIGKILL, SIGSTOP, SIGCONT, SIGTERM). */
  signal (sig: NodeJS.Signals): void {
    if (this.child?.pid === undefined || !this.running) throw new Error(`agent ${this.agent.name} is not running`)
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

/** Stops every agent, whatever state each is in; never throws. */
export async function stopAgents (agents: readonly AgentProcess[]): Promise<void> {
  await Promise.all(agents.map(async a => { await a.stop().catch(() => {}); a.close() }))
}
