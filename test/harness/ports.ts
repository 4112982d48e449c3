/** Free TCP ports on loopback, chosen by the kernel (bind to port 0, read it, close). */
import { createServer } from 'node:net'

export async function freePort (host = '127.0.0.1'): Promise<number> {
  return await new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, host, () => {
      const address = server.address()
      const port = typeof address === 'object' && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })
}

/** n distinct free ports (asked for together so the kernel cannot hand out one twice). */
export async function freePorts (n: number, host = '127.0.0.1'): Promise<number[]> {
  const ports = new Set<number>()
  while (ports.size < n) ports.add(await freePort(host))
  return [...ports]
}
