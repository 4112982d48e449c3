/** Free TCP ports, chosen by the kernel (bind to port 0, read it, close): for local swarms, benchmarks and tests. */
import { createServer, type ListenOptions, type Server } from 'node:net'

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

/**
 * Starts server listening on host:port. A failure is one sentence naming what the port is for
 * ("the metrics port 10.0.0.7:9400 is already in use"), which the agent's last line and so the
 * pod's termination message carry, instead of node's bare "listen EADDRINUSE".
 */
export async function listenOn (server: Pick<Server, 'listen' | 'once' | 'off'>, what: string, host: string, port: number, options: Omit<ListenOptions, 'host' | 'port'> = {}): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const failed = (err: NodeJS.ErrnoException): void => {
      reject(new Error(err.code === 'EADDRINUSE'
        ? `the ${what} port ${host}:${port} is already in use`
        : `the ${what} port ${host}:${port} cannot be opened: ${err.message}`))
    }
    server.once('error', failed)
    server.listen({ ...options, host, port }, () => { server.off('error', failed); resolve() })
  })
}
