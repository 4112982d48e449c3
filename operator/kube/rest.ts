/**
 * The operator's one HTTP door to the API server: JSON in, JSON out, every request counted.
 * Raw JSON (not client-node's typed models) keeps int-or-string and unknown fields intact, and
 * lets server-side apply send exactly the object the builders made.
 */
import http from 'node:http'
import https from 'node:https'
import type { KubeConfig } from '@kubernetes/client-node'

export class ApiError extends Error {
  constructor (readonly code: number, message: string, readonly reason?: string) { super(message) }
}

export interface RequestOptions {
  body?: unknown
  contentType?: string
  query?: Record<string, string | number | boolean | undefined>
  signal?: AbortSignal
}

export type RequestObserver = (method: string, path: string, code: number, seconds: number) => void

export class RestClient {
  private readonly server: URL
  private readonly agent: http.Agent
  observer: RequestObserver = () => {}

  constructor (private readonly kc: KubeConfig) {
    const cluster = kc.getCurrentCluster()
    if (cluster === null) throw new Error('The kubeconfig names no current cluster.')
    this.server = new URL(cluster.server)
    this.agent = this.server.protocol === 'https:' ? new https.Agent({ keepAlive: true, maxSockets: 32 }) : new http.Agent({ keepAlive: true, maxSockets: 32 })
  }

  async request<T = any> (method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    const url = new URL(path, this.server)
    for (const [k, v] of Object.entries(opts.query ?? {})) if (v !== undefined) url.searchParams.set(k, String(v))
    const o: https.RequestOptions = { method, headers: { Accept: 'application/json' }, agent: this.agent, signal: opts.signal }
    await this.kc.applyToHTTPSOptions(o)
    o.agent = this.agent // applyToHTTPSOptions may set its own agent; keep the pooled one with the TLS material
    const payload = opts.body === undefined ? undefined : JSON.stringify(opts.body)
    if (payload !== undefined) o.headers = { ...o.headers, 'Content-Type': opts.contentType ?? 'application/json', 'Content-Length': Buffer.byteLength(payload) }
    const started = process.hrtime.bigint()
    const lib = url.protocol === 'https:' ? https : http
    const { code, text } = await new Promise<{ code: number, text: string }>((resolve, reject) => {
      const req = lib.request(url, o, res => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('end', () => resolve({ code: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }))
        res.on('error', reject)
      })
      req.on('error', reject)
      req.end(payload)
    })
    this.observer(method, path, code, Number(process.hrtime.bigint() - started) / 1e9)
    const json = text === '' ? undefined : safeJson(text)
    if (code >= 400) {
      const msg = typeof json?.message === 'string' ? json.message : `${method} ${url.pathname} answered HTTP ${code}`
      throw new ApiError(code, msg, json?.reason)
    }
    return json as T
  }

  close (): void { this.agent.destroy() }
}

function safeJson (text: string): any {
  try { return JSON.parse(text) } catch { return { message: text.slice(0, 300) } }
}
