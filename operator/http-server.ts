/** /metrics, /healthz and /readyz of the operator process. */
import http from 'node:http'
import type { Registry } from 'prom-client'

export interface HealthState { healthy (): boolean, ready (): boolean }

export async function startHttpServer (host: string, port: number, registry: Registry, health: HealthState): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]
    const reply = (code: number, body: string, type = 'text/plain; charset=utf-8') => { res.writeHead(code, { 'Content-Type': type }); res.end(body) }
    if (path === '/metrics') {
      registry.metrics().then(m => reply(200, m, registry.contentType), (e: unknown) => reply(500, String(e)))
    } else if (path === '/healthz' || path === '/livez') {
      health.healthy() ? reply(200, 'ok\n') : reply(503, 'unhealthy\n')
    } else if (path === '/readyz') {
      health.ready() ? reply(200, 'ok\n') : reply(503, 'caches not synced\n')
    } else reply(404, 'not found\n')
  })
  await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(port, host, resolve) })
  return server
}
