// Reading real agent processes that run on loopback addresses (no network namespaces): their
// metrics endpoint and their log files.
import { readFileSync } from 'node:fs'
import { parsePrometheusText, sumOf } from '../../operator/controller/prom-text.js'

/** The sum of a metric's series that carry `labels`, as the agent at ip:port serves it; undefined while it serves none. */
export async function metricAt (ip: string, port: number, name: string, labels: Record<string, string> = {}): Promise<number | undefined> {
  try {
    const text = await (await fetch(`http://${ip}:${port}/metrics`, { signal: AbortSignal.timeout(3000) })).text()
    return sumOf(parsePrometheusText(text), name, labels)
  } catch { return undefined }
}

/** The messages of an agent's log (pino JSON lines) that match. */
export function logged (path: string, pattern: RegExp): string[] {
  let text = ''
  try { text = readFileSync(path, 'utf8') } catch { return [] }
  return text.split('\n').filter(l => l.startsWith('{')).map(l => { try { return String((JSON.parse(l) as { msg?: unknown }).msg) } catch { return '' } }).filter(m => pattern.test(m))
}
