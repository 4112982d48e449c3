/** Free TCP ports, chosen by the kernel (bind to port 0, read it, close): for local swarms, benchmarks and tests. */
import { createServer, type Server } from 'node:net'

/** n distinct TCP ports free on host right now (held together while chosen, so none is handed out twice, then released). */
export async function freePorts (n: number, host = '127.0.0.1'): Promise<number[]> {
  const servers: Server[] = []
  try {
    for (let i = 0; i < n; i++) {
      const s = createServer()
      await new Promise<void>((resolve, reject) => { s.once('error', reject); s.listen(0, host, resolve) })
      servers.push(s)
    }
    return servers.map(s => (s.address() as { port: number }).port)
  } finally {
    await Promise.all(servers.map(async s => await new Promise<void>(resolve => { s.close(() => { resolve() }) })))
  }
}

/** One TCP port free on host right now. */
export async function freePort (host = '127.0.0.1'): Promise<number> {
  return (await freePorts(1, host))[0]
}
