/**
 * The trainer containers of a local sidecar swarm: each runs as a process on this machine, next to
 * its agent, once that agent is ready. What a trainer says last is kept for the summary.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { createWriteStream, existsSync } from 'node:fs'
import { delimiter, join } from 'node:path'
import type { LocalPod } from './pods.js'
import { UserError } from './user-error.js'

/** What a trainer left behind when it exited. */
export interface TrainerExit { readonly pod: string, readonly code: number | null, readonly signal: string | null, readonly lastErr: string, readonly lastOut: string }

/** The trainer's command line: the spec's command and args, with --python standing in for a bare python/python3. */
export function trainerArgv (pod: LocalPod, python: string | undefined): string[] {
  const t = pod.trainer
  if (t === undefined || t.command.length === 0) {
    throw new UserError('workload.trainer.command is required to run a sidecar swarm locally: the trainer image is not used here, so its entrypoint cannot run (e.g. command: ["python3", "trainer.py"])')
  }
  const argv = [...t.command, ...t.args]
  if (python !== undefined && /^python(3(\.\d+)?)?$/.test(argv[0])) argv[0] = python
  return argv
}

/** Last non-empty line of a stream, kept as the stream flows (for a failing trainer's one-line reason). */
function lastLineOf (stream: NodeJS.ReadableStream | null, onLine: (line: string) => void): void {
  let tail = ''
  stream?.on('data', (d: Buffer) => {
    tail = (tail + d.toString()).slice(-4096)
    const lines = tail.split('\n').map(l => l.trim()).filter(l => l.length > 0)
    if (lines.length > 0) onLine(lines[lines.length - 1].slice(0, 300))
  })
}

export async function waitReady (pod: LocalPod, metricsPort: number, until: () => boolean): Promise<void> {
  const deadline = Date.now() + 60_000
  while (Date.now() < deadline && !until()) {
    try {
      if ((await fetch(`http://${pod.ip}:${metricsPort}/readyz`, { signal: AbortSignal.timeout(1000) })).ok) return
    } catch { /* not listening yet */ }
    await new Promise(r => setTimeout(r, 250))
  }
}

export interface TrainerRun {
  readonly trainers: readonly LocalPod[]
  readonly python: string | undefined
  readonly repoRoot: string
  readonly runDir: string
  readonly metricsPort: number
  /** The env its agent got beyond the pod's (sidecar port, shm folder), which the trainer shares. */
  readonly agentEnvOf: ReadonlyMap<string, Record<string, string>>
  readonly stopping: () => boolean
  /** Called as each trainer exits on its own. */
  readonly onExit: (exit: TrainerExit, logPath: string) => void
}

/** The trainers of a run: the processes running now (one per pod at most), and a pod's trainer killed or started again. */
export interface Trainers {
  /** The trainer processes running or exited on their own (a killed one leaves the list). */
  readonly children: ChildProcess[]
  /** SIGKILL to the pod's trainer (its exit is not reported as the trainer's own); false when none runs. */
  kill: (pod: string) => Promise<boolean>
  /** Starts the pod's trainer again (a pod started again: agent and trainer together, without waiting for the agent). */
  start: (pod: string) => void
}

/** Starts each pod's trainer once its agent is ready. */
export function startTrainers (r: TrainerRun): Trainers {
  const children: ChildProcess[] = []
  const running = new Map<string, ChildProcess>()
  const killed = new Set<ChildProcess>()
  const venvBin = join(r.repoRoot, '.venv', 'bin')
  const pathFirst = existsSync(venvBin) ? [venvBin] : []
  const first = r.trainers[0].trainer!
  console.log(`trainers run locally as \`${trainerArgv(r.trainers[0], r.python).join(' ')}\` in ${r.repoRoot}${pathFirst.length > 0 ? ` with ${venvBin} first on PATH` : ''}; the trainer image ${first.image} is not used locally`)
  const spawnTrainer = (pod: LocalPod): void => {
    const argv = trainerArgv(pod, r.python)
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      ...pod.trainer!.env,
      ...r.agentEnvOf.get(pod.name),
      PATH: [...pathFirst, process.env.PATH ?? ''].join(delimiter),
      PYTHONUNBUFFERED: '1'
    }
    const logPath = join(r.runDir, `${pod.name}.trainer.log`)
    const child = spawn(argv[0], argv.slice(1), { cwd: r.repoRoot, env, stdio: ['ignore', 'pipe', 'pipe'] })
    let lastErr = ''; let lastOut = ''
    lastLineOf(child.stderr, l => { lastErr = l })
    lastLineOf(child.stdout, l => { lastOut = l })
    const log = createWriteStream(logPath, { flags: 'a' })
    child.stdout?.pipe(log); child.stderr?.pipe(log)
    child.on('error', (err) => { lastErr = `cannot start ${argv[0]}: ${err.message}` })
    child.on('close', (code, signal) => {
      if (running.get(pod.name) === child) running.delete(pod.name)
      if (killed.delete(child)) return
      if (!r.stopping()) r.onExit({ pod: pod.name, code, signal, lastErr, lastOut }, logPath)
    })
    children.push(child)
    running.set(pod.name, child)
  }
  for (const pod of r.trainers) {
    // A pod starts its containers together; starting each trainer once its agent is ready spares
    // the trainer's client the wait (it waits for its agent in a cluster).
    void waitReady(pod, r.metricsPort, r.stopping).then(() => { if (!r.stopping()) spawnTrainer(pod) })
  }
  return {
    children,
    kill: async (name) => {
      const child = running.get(name)
      if (child === undefined || child.exitCode !== null || child.signalCode !== null) return false
      killed.add(child)
      children.splice(children.indexOf(child), 1)
      await new Promise<void>(done => { child.once('close', () => { done() }); child.kill('SIGKILL') })
      return true
    },
    start: (name) => {
      const pod = r.trainers.find(p => p.name === name)
      if (pod !== undefined && !running.has(name) && !r.stopping()) spawnTrainer(pod)
    }
  }
}

/** SIGTERM to each, then SIGKILL to those still running after 15 s. */
export async function stopTrainers (list: readonly ChildProcess[]): Promise<void> {
  await Promise.all(list.map(async c => await new Promise<void>(done => {
    if (c.exitCode !== null || c.signalCode !== null) { done(); return }
    const kill = setTimeout(() => { c.kill('SIGKILL') }, 15_000)
    c.once('exit', () => { clearTimeout(kill); done() })
    c.kill('SIGTERM')
  })))
}
