/**
 * Runs the real operator (dist/operator/main.js) as a child process against a test cluster, and
 * reads its /metrics: what end-to-end tests need to start, kill and observe it.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { createWriteStream, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { freePort } from '../../../agent/util/ports.js'
import { parsePrometheusText, sumOf } from '../../../operator/controller/prom-text.js'

export interface OperatorProcess {
  readonly child: ChildProcess
  readonly metricsUrl: string
  readonly logFile: string
  metric (name: string, labels?: Record<string, string>): Promise<number | undefined>
  ready (): Promise<boolean>
  kill (signal?: NodeJS.Signals): Promise<number | null>
}

export async function startOperator (kubeconfig: string, logDir: string, name: string, extraArgs: string[] = []): Promise<OperatorProcess> {
  const port = await freePort()
  const logFile = join(logDir, `${name}.log`)
  const out = createWriteStream(logFile, { flags: 'a' })
  const child = spawn(join('node_modules', '.bin', 'node'), [
    'dist/operator/main.js', '--kubeconfig', kubeconfig, '--metrics-bind-address', `127.0.0.1:${port}`,
    '--lease-namespace', 'default', '--identity', name, '--progress-interval-seconds', '2', '--log-level', 'debug', ...extraArgs
  ], { stdio: ['ignore', 'pipe', 'pipe'] })
  child.stdout?.pipe(out)
  child.stderr?.pipe(out)
  const metricsUrl = `http://127.0.0.1:${port}/metrics`
  const exited = new Promise<number | null>(resolve => child.on('exit', code => resolve(code)))
  // A failed read names the operator, whether its process still runs, and its last log line, so a
  // test that reads a dead or not yet listening operator says which, not just "fetch failed".
  const unreachable = (err: unknown): Error => {
    const state = child.exitCode !== null || child.signalCode !== null ? `exited (${child.exitCode ?? child.signalCode})` : 'running'
    let last = ''
    try { last = readFileSync(logFile, 'utf8').trimEnd().split('\n').at(-1) ?? '' } catch {}
    return new Error(`${name}'s metrics server at 127.0.0.1:${port} did not answer (${(err as Error).message}); its process is ${state}; last log line: ${last}`)
  }
  return {
    child,
    metricsUrl,
    logFile,
    async metric (metric, labels = {}) {
      const res = await fetch(metricsUrl, { signal: AbortSignal.timeout(2000) }).catch((err: unknown) => { throw unreachable(err) })
      return sumOf(parsePrometheusText(await res.text()), metric, labels)
    },
    async ready () {
      // Not yet ready is false; not answering at all throws what unreachable() says, which waitFor
      // reports when it gives up (an operator that exited says so there).
      return (await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(2000) }).catch((err: unknown) => { throw unreachable(err) })).ok
    },
    async kill (signal = 'SIGTERM') {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode
      child.kill(signal)
      return await exited
    }
  }
}
