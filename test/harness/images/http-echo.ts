/**
 * The "averaging-swarm/http-echo" test image: an HTTP server on $POD_IP:$PORT (default 8080) that
 * answers every request with a JSON line naming the pod, so a test can prove the process behind a
 * pod IP is that pod. /healthz answers 200 unless $UNHEALTHY_AFTER_MS has passed since start.
 */
import { createServer } from 'node:http'

const host = process.env.POD_IP ?? '127.0.0.1'
const port = Number.parseInt(process.env.PORT ?? '8080', 10)
const startedAt = Date.now()
const unhealthyAfter = process.env.UNHEALTHY_AFTER_MS !== undefined ? Number.parseInt(process.env.UNHEALTHY_AFTER_MS, 10) : Infinity

const server = createServer((req, res) => {
  if (req.url === '/healthz' && Date.now() - startedAt > unhealthyAfter) {
    res.writeHead(500).end('unhealthy\n')
    return
  }
  res.writeHead(200, { 'content-type': 'application/json' })
  res.end(JSON.stringify({ pod: process.env.POD_NAME, namespace: process.env.POD_NAMESPACE, ip: host, path: req.url }) + '\n')
})
server.listen(port, host, () => { console.log(`http-echo listening on ${host}:${port}`) })
process.on('SIGTERM', () => { console.log('http-echo got SIGTERM'); server.close(() => process.exit(0)) })
