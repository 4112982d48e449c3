/**
 * The slice of the kubelet API that `kubectl logs` needs: the API server proxies
 * GET /containerLogs/<ns>/<pod>/<container> to the node's InternalIP and
 * status.daemonEndpoints.kubeletEndpoint.Port. One HTTPS server per node address (the API server
 * does not verify the kubelet's certificate unless told to). Supports follow, tailLines,
 * previous and timestamps (ignored); the harness's own "--- ..." marker lines are left out.
 */
import { createServer, type Server } from 'node:https'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { existsSync, readFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'

/** Marker lines the test kubelet writes between runs of a container (see container.ts). */
const MARKER = /^--- \d{4}-\d\d-\d\dT[^ ]+ (start #|exited:|liveness probe failed)/

/** Pure: the lines of the latest run (or the one before it), optionally only the last n. */
export function selectLog (content: string, previous: boolean, tailLines: number | undefined): string {
  const runs: string[][] = [[]]
  for (const line of content.split('\n')) {
    if (MARKER.test(line)) { if (line.includes(' start #')) runs.push([]); continue }
    runs[runs.length - 1].push(line)
  }
  const run = (previous ? runs[runs.length - 2] : runs[runs.length - 1]) ?? []
  let text = run.join('\n')
  if (tailLines !== undefined) {
    const lines = text.replace(/\n$/, '').split('\n')
    text = lines.slice(Math.max(0, lines.length - tailLines)).join('\n') + (lines.length > 0 ? '\n' : '')
  }
  return text
}

export interface LogServer { readonly port: number, stop: () => Promise<void> }

export async function startLogServer (host: string, tls: { cert: string, key: string }, logFile: (ns: string, pod: string, container: string) => string | undefined): Promise<LogServer> {
  const server: Server = createServer({ cert: readFileSync(tls.cert), key: readFileSync(tls.key) }, (req, res) => {
    try {
      serve(req, res)
    } catch (error) {
      if (!res.headersSent) res.writeHead(500)
      res.end(`${(error as Error).message}\n`)
    }
  })
  const serve = (req: IncomingMessage, res: ServerResponse): void => {
    const url = new URL(req.url ?? '/', 'https://kubelet')
    if (url.pathname === '/healthz') { res.end('ok'); return }
    const match = /^\/containerLogs\/([^/]+)\/([^/]+)\/([^/]+)$/.exec(url.pathname)
    const file = match === null ? undefined : logFile(decodeURIComponent(match[1]), decodeURIComponent(match[2]), decodeURIComponent(match[3]))
    if (file === undefined || !existsSync(file)) { res.writeHead(404).end('container log not found on this test kubelet\n'); return }
    const tail = url.searchParams.get('tailLines')
    const previous = url.searchParams.get('previous') === 'true'
    const text = selectLog(readFileSync(file, 'utf8'), previous, tail !== null ? Number.parseInt(tail, 10) : undefined)
    res.writeHead(200, { 'content-type': 'text/plain' })
    res.write(text)
    if (url.searchParams.get('follow') !== 'true' || previous) { res.end(); return }
    // Follow: poll the file for appended bytes until the client goes away.
    let offset = Buffer.byteLength(readFileSync(file, 'utf8'))
    const timer = setInterval(() => {
      let all: Buffer
      try { all = readFileSync(file) } catch { clearInterval(timer); res.end(); return }
      if (all.length <= offset) return
      const added = all.subarray(offset).toString('utf8').split('\n').filter((l) => !MARKER.test(l)).join('\n')
      offset = all.length
      res.write(added)
    }, 500)
    req.on('close', () => clearInterval(timer))
  }
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, host, () => { server.off('error', reject); resolve() })
  })
  return {
    port: (server.address() as AddressInfo).port,
    stop: async () => { server.closeAllConnections(); await new Promise<void>((resolve) => server.close(() => resolve())) }
  }
}
