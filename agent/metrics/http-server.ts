import { createServer, type Server } from 'node:http'
import type { Registry } from 'prom-client'
import { listenOn } from '../util/ports.js'

export interface HealthState {
  /** The process works (event loop turning, node started). */
  live (): boolean
  /** Joined the DHT and, for a newcomer, loaded its state: ready for rounds. */
  ready (): boolean
}

/** /metrics, /healthz and /readyz on one port, as the pod's probes and Prometheus expect. */
export async function startMetricsServer (host: string, port: number, registry: Registry, health: HealthState): Promise<Server> {
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]
    if (req.method !== 'GET') { res.writeHead(405).end('method not allowed\n'); return }
    if (path === '/metrics') {
      registry.metrics().then(
        (text) => { res.writeHead(200, { 'content-type': registry.contentType }).end(text) },
        (err: Error) => { res.writeHead(500).end(`${err.message}\n`) })
      return
    }
    if (path === '/healthz') { const ok = health.live(); res.writeHead(ok ? 200 : 503).end(ok ? 'ok\n' : 'not live\n'); return }
    if (path === '/readyz') { const ok = health.ready(); res.writeHead(ok ? 200 : 503).end(ok ? 'ready\n' : 'not ready\n'); return }
    res.writeHead(404).end('not found\n')
  })
  await listenOn(server, 'metrics', host, port)
  return server
}
