/**
 * Plain TCP forwarding, the test cluster's stand-in for the packet rewriting a real node does for
 * hostPort (the CNI portmap plugin's DNAT) and for node ports and load balancers (kube-proxy).
 * Unlike DNAT the pod sees the forwarder's address as the source, not the client's.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net'

export interface Forwarder { readonly host: string, readonly port: number, close: () => Promise<void> }

/** Listens on host:port and pipes each connection to target() (a refused connection when it gives none). */
export async function forwardTcp (host: string, port: number, target: () => { host: string, port: number } | undefined): Promise<Forwarder> {
  const sockets = new Set<Socket>()
  const server: Server = createServer((client) => {
    sockets.add(client)
    client.on('close', () => sockets.delete(client))
    client.on('error', () => {})
    const to = target()
    if (to === undefined) { client.destroy(); return }
    const upstream = createConnection({ host: to.host, port: to.port })
    sockets.add(upstream)
    upstream.on('close', () => { sockets.delete(upstream); client.destroy() })
    upstream.on('error', () => { client.destroy() })
    client.on('close', () => upstream.destroy())
    client.pipe(upstream)
    upstream.pipe(client)
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen({ host, port }, () => { server.off('error', reject); resolve() })
  })
  return {
    host,
    port,
    close: async () => {
      for (const s of sockets) s.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}
