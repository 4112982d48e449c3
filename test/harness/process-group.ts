/**
 * A child process in its own process group (detached spawn), its stdout and stderr appended to a
 * log file. stop() signals the whole group (kill(-pid)), so grandchildren die too.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { openSync, closeSync } from 'node:fs'
import { onTeardown } from './cleanup.js'
import { watchGroup, unwatchGroup } from './reaper.js'

export interface GroupProcessOptions {
  readonly command: string
  readonly args: readonly string[]
  readonly logFile: string
  readonly cwd?: string
  readonly env?: NodeJS.ProcessEnv
  /** Registered with the process-wide teardown so signals and exit kill it. Default true. */
  readonly registerTeardown?: boolean
}

export interface Exit { readonly code: number | null, readonly signal: NodeJS.Signals | null }

export interface GroupProcess {
  readonly pid: number
  readonly logFile: string
  /** Resolves when the process exits. */
  readonly exited: Promise<Exit>
  readonly hasExited: () => boolean
  /** Sends `signal` to the whole group; no-op once exited. */
  readonly signal: (signal: NodeJS.Signals) => void
  /** SIGTERM, then SIGKILL after graceMs; resolves when the process has exited. */
  readonly stop: (graceMs?: number) => Promise<Exit>
}

export function startGroupProcess (options: GroupProcessOptions): GroupProcess {
  const fd = openSync(options.logFile, 'a')
  let child: ChildProcess
  try {
    child = spawn(options.command, [...options.args], {
      cwd: options.cwd,
      env: options.env ?? process.env,
      detached: true,
      stdio: ['ignore', fd, fd]
    })
  } finally {
    closeSync(fd)
  }
  let done = false
  const exited = new Promise<Exit>((resolve) => {
    child.once('exit', (code, signal) => { done = true; resolve({ code, signal }) })
    child.once('error', () => { done = true; resolve({ code: 127, signal: null }) })
  })
  const pid = child.pid ?? -1
  watchGroup(pid)
  // Like a container's cgroup: when the leader exits, whatever it left in its group dies too.
  void exited.then(() => {
    if (pid <= 0) return
    try { process.kill(-pid, 'SIGKILL') } catch {}
    unwatchGroup(pid)
  })
  const signal = (sig: NodeJS.Signals): void => {
    if (done || pid <= 0) return
    try { process.kill(-pid, sig) } catch {}
  }
  const stop = async (graceMs = 5000): Promise<Exit> => {
    signal('SIGTERM')
    const timer = setTimeout(() => signal('SIGKILL'), graceMs)
    const exit = await exited
    clearTimeout(timer)
    // Grandchildren that ignored SIGTERM keep the group alive after the leader exits.
    try { process.kill(-pid, 'SIGKILL') } catch {}
    unwatchGroup(pid)
    return exit
  }
  if (options.registerTeardown !== false) {
    const unregister = onTeardown(async () => { await stop(2000) }, () => signal('SIGKILL'))
    void exited.then(unregister)
  }
  return { pid, logFile: options.logFile, exited, hasExited: () => done, signal, stop }
}
