/**
 * Runs one container of a pod as a local process group, over and over as restartPolicy says:
 * resolve env → spawn → probe → exit → back off → restart. It keeps the container's
 * ContainerRecord current and calls onChange whenever the record changes.
 */
import { appendFileSync, closeSync, openSync, readSync, statSync } from 'node:fs'
import { join } from 'node:path'
import type { V1Container, V1Pod, V1ContainerState } from '@kubernetes/client-node'
import { startGroupProcess, type GroupProcess, type Exit } from '../process-group.js'
import { rfc3339, wireTime } from '../time.js'
import { resolveEnv, ContainerConfigError, type PodAddresses } from './env.js'
import { resolveCommand, type ImageTable } from './images.js'
import { mountTable, rewritePaths, SERVICE_ACCOUNT_MOUNT, type MaterialisedVolumes } from './volumes.js'
import { probeOnce, startProber, type Prober } from './probes.js'
import type { PodSources } from './pod-sources.js'
import type { ContainerRecord } from './pod-status.js'
import type { PodEventRecorder } from './events.js'

export interface Backoff { readonly initialMs: number, readonly maxMs: number }

export interface ContainerContext {
  readonly pod: () => V1Pod
  readonly addresses: PodAddresses
  readonly podDir: string
  readonly logDir: string
  readonly volumes: MaterialisedVolumes
  readonly sources: PodSources
  readonly images: ImageTable
  /** Variables every container gets (AVS_DNS_SERVERS, KUBERNETES_SERVICE_HOST, ...); pod env wins. */
  readonly injectedEnv: Readonly<Record<string, string>>
  readonly backoff: Backoff
  readonly onChange: () => void
  readonly event: PodEventRecorder
}

/** Variables passed through from the kubelet's own environment, as an image's defaults would be. */
const PASSTHROUGH = ['PATH', 'HOME', 'LANG', 'TMPDIR', 'TZ']

function exitState (exit: Exit, startedAt: string, containerID: string, logTail?: () => string): V1ContainerState {
  const signals: Record<string, number> = { SIGKILL: 9, SIGTERM: 15, SIGINT: 2, SIGABRT: 6, SIGSEGV: 11 }
  const exitCode = exit.code ?? 128 + (signals[exit.signal ?? ''] ?? 0)
  // terminationMessagePolicy FallbackToLogsOnError: a failed container's log tail is its message.
  const message = exitCode !== 0 ? logTail?.() : undefined
  return {
    terminated: {
      exitCode,
      reason: exitCode === 0 ? 'Completed' : 'Error',
      ...(message === undefined || message === '' ? {} : { message }),
      startedAt: wireTime(startedAt),
      finishedAt: wireTime(rfc3339()),
      containerID
    }
  }
}

/** What the kubelet keeps of a log for FallbackToLogsOnError: the last 80 lines, at most 2048 bytes. */
const TAIL_LINES = 80
const TAIL_BYTES = 2048

/** The tail of this run's output in a log file, from byte offset `from` (the harness's own --- lines left out). */
function readLogTail (file: string, from: number): string {
  let fd: number | undefined
  try {
    const size = statSync(file).size
    const start = Math.max(from, size - 4 * TAIL_BYTES)
    const buf = Buffer.alloc(size - start)
    fd = openSync(file, 'r')
    readSync(fd, buf, 0, buf.length, start)
    const lines = buf.toString('utf8').split('\n').filter(l => !l.startsWith('--- '))
    const tail = lines.slice(-TAIL_LINES - 1).join('\n')
    return Buffer.from(tail).subarray(-TAIL_BYTES).toString('utf8')
  } catch {
    return ''
  } finally {
    if (fd !== undefined) closeSync(fd)
  }
}

export class ContainerRunner {
  record: ContainerRecord
  private process: GroupProcess | undefined
  private probers: Prober[] = []
  private stopping = false
  private wake: (() => void) | undefined
  private livenessKill = false

  constructor (private readonly container: V1Container, private readonly ctx: ContainerContext, private readonly isInit: boolean) {
    this.record = {
      name: container.name,
      image: container.image ?? '',
      state: { waiting: { reason: 'ContainerCreating' } },
      ready: false,
      started: false,
      restartCount: 0,
      finished: false,
      everStarted: false
    }
  }

  get logFile (): string { return join(this.ctx.logDir, `${this.container.name}.log`) }

  private set (update: Partial<ContainerRecord>): void {
    this.record = { ...this.record, ...update }
    this.ctx.onChange()
  }

  /** Sleeps, but stop() wakes it early. */
  private async pause (ms: number): Promise<void> {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms)
      this.wake = () => { clearTimeout(timer); resolve() }
    })
    this.wake = undefined
  }

  private restartWanted (exitCode: number): boolean {
    const policy = this.ctx.pod().spec?.restartPolicy ?? 'Always'
    if (this.isInit) return exitCode !== 0 && policy !== 'Never'
    if (policy === 'Always') return true
    if (policy === 'OnFailure') return exitCode !== 0
    return false
  }

  /** Runs until the container is finished for good or stop() is called; returns the last exit code. */
  async run (): Promise<number> {
    let failures = 0
    for (;;) {
      if (this.stopping) return -1
      let started: Awaited<ReturnType<ContainerRunner['startOnce']>>
      try {
        started = await this.startOnce()
      } catch (error) {
        // spawn itself failed (bad cwd, unreadable log dir): report it and retry like the kubelet.
        this.set({ state: { waiting: { reason: 'RunContainerError', message: (error as Error).message } } })
        this.ctx.event('Warning', 'Failed', `Error: ${(error as Error).message}`)
        started = undefined
      }
      if (started === undefined) { await this.pause(2000); continue }
      const { exit, startedAt, containerID, logOffset } = started
      this.stopProbers()
      const fromLogs = this.container.terminationMessagePolicy === 'FallbackToLogsOnError'
      const state = exitState(exit, startedAt, containerID, fromLogs ? () => readLogTail(this.logFile, logOffset) : undefined)
      const exitCode = state.terminated?.exitCode ?? 1
      const ranMs = Date.now() - Date.parse(startedAt)
      const restart = !this.stopping && (this.livenessKill || this.restartWanted(exitCode))
      this.livenessKill = false
      if (!restart) {
        this.set({ state, ready: false, started: false, finished: true })
        return exitCode
      }
      failures = ranMs > 2 * this.ctx.backoff.maxMs ? 1 : failures + 1
      const delay = Math.min(this.ctx.backoff.initialMs * 2 ** (failures - 1), this.ctx.backoff.maxMs)
      this.ctx.event('Warning', 'BackOff', `Back-off restarting failed container ${this.container.name} in pod ${this.ctx.pod().metadata?.name ?? ''}`)
      this.set({
        lastState: state,
        state: { waiting: { reason: exitCode === 0 ? 'Completed' : 'CrashLoopBackOff', message: `back-off ${Math.round(delay / 1000)}s restarting failed container=${this.container.name}` } },
        ready: false,
        started: false
      })
      await this.pause(delay)
      if (this.stopping) return exitCode
      this.set({ restartCount: this.record.restartCount + 1 })
    }
  }

  private async startOnce (): Promise<{ exit: Exit, startedAt: string, containerID: string, logOffset: number } | undefined> {
    const pod = this.ctx.pod()
    let env: Map<string, string>
    try {
      env = await resolveEnv(pod, this.container, this.ctx.addresses, this.ctx.sources)
    } catch (error) {
      const reason = error instanceof ContainerConfigError ? 'CreateContainerConfigError' : 'CreateContainerError'
      this.set({ state: { waiting: { reason, message: (error as Error).message } } })
      this.ctx.event('Warning', 'Failed', `Error: ${(error as Error).message}`)
      return undefined
    }
    const command = resolveCommand(this.container, this.ctx.images, this.ctx.podDir)
    if (typeof command === 'string') {
      this.set({ state: { waiting: { reason: 'ErrImagePull', message: command } } })
      this.ctx.event('Warning', 'Failed', command)
      return undefined
    }
    const mounts = mountTable(this.container, this.ctx.volumes)
    const fullEnv: NodeJS.ProcessEnv = {}
    for (const name of PASSTHROUGH) if (process.env[name] !== undefined) fullEnv[name] = process.env[name]
    Object.assign(fullEnv, this.ctx.injectedEnv)
    const tokenMount = (this.container.volumeMounts ?? []).find((m) => m.mountPath.replace(/\/+$/, '') === SERVICE_ACCOUNT_MOUNT && this.ctx.volumes.tokenVolumes.has(m.name))
    if (tokenMount !== undefined) fullEnv.KUBECONFIG = join(this.ctx.volumes.dirs.get(tokenMount.name) ?? '', 'kubeconfig')
    for (const [k, v] of env) fullEnv[k] = rewritePaths(v, mounts)
    const args = command.args.map((a, i) => i + 1 < command.fromImage ? a : rewritePaths(a, mounts))
    const file = command.fromImage > 0 ? command.file : rewritePaths(command.file, mounts)
    const cwd = this.container.workingDir !== undefined ? rewritePaths(this.container.workingDir, mounts) : command.cwd
    if (this.stopping) return undefined
    const startedAt = rfc3339()
    const containerID = `avs-process://${pod.metadata?.uid ?? ''}/${this.container.name}/${this.record.restartCount}`
    appendFileSync(this.logFile, `--- ${startedAt} start #${this.record.restartCount}: ${file} ${args.join(' ')}\n`)
    const logOffset = statSync(this.logFile).size
    const proc = startGroupProcess({ command: file, args, cwd, env: fullEnv, logFile: this.logFile })
    this.process = proc
    this.ctx.event('Normal', 'Started', `Started container ${this.container.name}`)
    const probeEnv = fullEnv
    const hasStartup = this.container.startupProbe !== undefined
    this.set({
      containerID,
      state: { running: { startedAt: wireTime(startedAt) } },
      started: !hasStartup,
      ready: !hasStartup && this.container.readinessProbe === undefined,
      everStarted: true
    })
    const attempt = (probe: NonNullable<V1Container['readinessProbe']>) => async () => await probeOnce(probe, this.container, this.ctx.addresses.podIP, probeEnv, cwd)
    const startMain = (): void => {
      const readiness = this.container.readinessProbe
      if (readiness !== undefined) {
        this.probers.push(startProber(readiness, attempt(readiness), (ok) => {
          if (this.process !== proc) return
          if (!ok) this.ctx.event('Warning', 'Unhealthy', `Readiness probe failed for container ${this.container.name}`)
          this.set({ ready: ok })
        }))
      } else this.set({ ready: true })
      const liveness = this.container.livenessProbe
      if (liveness !== undefined) {
        this.probers.push(startProber(liveness, attempt(liveness), (ok) => {
          if (!ok && this.process === proc) {
            appendFileSync(this.logFile, `--- ${rfc3339()} liveness probe failed: killing container\n`)
            this.ctx.event('Warning', 'Unhealthy', `Liveness probe failed for container ${this.container.name}`)
            this.ctx.event('Normal', 'Killing', `Container ${this.container.name} failed liveness probe, will be restarted`)
            this.livenessKill = true
            void proc.stop(this.graceMs())
          }
        }))
      }
    }
    const startup = this.container.startupProbe
    if (startup !== undefined && !this.isInit) {
      this.probers.push(startProber({ ...startup, successThreshold: 1 }, attempt(startup), (ok) => {
        if (this.process !== proc) return
        if (ok) { this.set({ started: true }); startMain() } else { this.livenessKill = true; void proc.stop(this.graceMs()) }
      }))
    } else if (!this.isInit) startMain()
    const exit = await proc.exited
    this.process = undefined
    appendFileSync(this.logFile, `--- ${rfc3339()} exited: code ${String(exit.code)} signal ${String(exit.signal)}\n`)
    return { exit, startedAt, containerID, logOffset }
  }

  private graceMs (): number {
    return (this.ctx.pod().spec?.terminationGracePeriodSeconds ?? 30) * 1000
  }

  private stopProbers (): void {
    for (const prober of this.probers) prober.stop()
    this.probers = []
  }

  /** Stops restarting and kills the process: SIGTERM, then SIGKILL after graceMs. */
  async stop (graceMs: number): Promise<void> {
    this.stopping = true
    this.stopProbers()
    this.wake?.()
    const proc = this.process
    if (proc !== undefined) {
      if (graceMs > 0) this.ctx.event('Normal', 'Killing', `Stopping container ${this.container.name}`)
      await proc.stop(graceMs)
    }
  }
}
