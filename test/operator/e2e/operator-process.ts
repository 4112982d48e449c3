/**
 * Runs the real operator (dist/operator/main.js) as a child process against a test cluster, and
 * reads its /metrics: what end-to-end tests need to start, kill and observe it.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { createWriteStream } from 'node:fs'
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
  return {
    child,
    metricsUrl,
    logFile,
    async metric (metric, labels = {}) {
      const res = await fetch(metricsUrl, { signal: AbortSignal.timeout(2000) })
      return sumOf(parsePrometheusText(await res.text()), metric, labels)
    },
    async ready () {
      try { return (await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(2000) })).ok } catch { return false }
    },
    async kill (signal = 'SIGTERM') {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode
      child.kill(signal)
      return await exited
    }
  }
}
