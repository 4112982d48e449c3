/** A real Prometheus server (Debian's package) on loopback, scraping static targets, for tests. */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process'
import { mkdirSync, openSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { freePort } from '../../agent/util/ports.js'

/** honorLabels: keep the target's own labels on a clash (the operator's per-swarm `namespace`), as the chart's ServiceMonitor does. */
export interface ScrapeTarget { job: string, address: string, labels: Record<string, string>, honorLabels?: boolean }
export interface PromSample { metric: Record<string, string>, value: [number, string] }

export interface PrometheusServer {
  readonly url: string
  readonly logFile: string
  query (expr: string): Promise<PromSample[]>
  labelValues (label: string, match: string): Promise<string[]>
  stop (): Promise<void>
}

export function prometheusBinary (): string | undefined {
  try { return execFileSync('bash', ['-c', 'command -v prometheus'], { encoding: 'utf8' }).trim() || undefined } catch { return undefined }
}

export async function startPrometheus (binary: string, dir: string, targets: ScrapeTarget[], scrapeIntervalS = 1): Promise<PrometheusServer> {
  mkdirSync(join(dir, 'data'), { recursive: true })
  const jobs = [...new Set(targets.map(t => t.job))]
  const config = {
    global: { scrape_interval: `${scrapeIntervalS}s`, scrape_timeout: `${scrapeIntervalS}s`, evaluation_interval: `${scrapeIntervalS}s` },
    scrape_configs: jobs.map(job => ({
      job_name: job,
      honor_labels: targets.some(t => t.job === job && t.honorLabels === true),
      static_configs: targets.filter(t => t.job === job).map(t => ({ targets: [t.address], labels: t.labels }))
    }))
  }
  const configFile = join(dir, 'prometheus.yml')
  writeFileSync(configFile, JSON.stringify(config, null, 2)) // JSON is YAML
  const port = await freePort()
  const logFile = join(dir, 'prometheus.log')
  const log = openSync(logFile, 'a')
  const child: ChildProcess = spawn(binary, [
    `--config.file=${configFile}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`,
    '--storage.tsdb.retention.time=1h', '--log.level=warn'
  ], { stdio: ['ignore', log, log], detached: true })
  const exited = new Promise<void>(resolve => child.on('exit', () => resolve()))
  const url = `http://127.0.0.1:${port}`
  const api = async (path: string): Promise<any> => {
    const res = await fetch(`${url}${path}`, { signal: AbortSignal.timeout(5000) })
    const body = await res.json() as { status: string, data: any, error?: string }
    if (body.status !== 'success') throw new Error(`Prometheus ${path}: ${body.error ?? res.status}`)
    return body.data
  }
  return {
    url,
    logFile,
    async query (expr) {
      const data = await api(`/api/v1/query?query=${encodeURIComponent(expr)}`)
      return data.resultType === 'vector' ? data.result : []
    },
    async labelValues (label, match) { return await api(`/api/v1/label/${encodeURIComponent(label)}/values?match[]=${encodeURIComponent(match)}`) },
    async stop () {
      if (child.exitCode !== null || child.signalCode !== null) return
      try { process.kill(-child.pid!, 'SIGTERM') } catch { return }
      await Promise.race([exited, new Promise(resolve => setTimeout(resolve, 5000))])
      try { process.kill(-child.pid!, 'SIGKILL') } catch {}
    }
  }
}
