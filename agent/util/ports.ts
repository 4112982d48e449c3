/**
 * Free TCP ports for local swarms, benchmarks and tests, chosen below the kernel's ephemeral range.
 * A port chosen by binding port 0 comes from that range, and between its release and the agent's own
 * bind any outbound connection on the machine may take it as its local port: a fuzz run under load
 * lost its agent to "listen EADDRINUSE" that way. Below the range only listeners compete, and a
 * candidate already bound is skipped.
 */
import { readFileSync } from 'node:fs'
import { createServer, type Server } from 'node:net'

/** The first port of the kernel's ephemeral range (Linux), or undefined where it cannot be read. */
export function ephemeralLow (): number | undefined {
  try {
    const [low] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number)
    return Number.isInteger(low) && low > 0 ? low : undefined
  } catch {
    return undefined
  }
}

/** The lowest port handed out: clear of well-known and most registered services' ports. */
const LOWEST = 20_000

async function listen (port: number, host: string): Promise<Server | null> {
  const s = createServer()
  return await new Promise<Server | null>((resolve) => {
    s.once('error', () => { resolve(null) })
    s.listen(port, host, () => { resolve(s) })
  })
}

/** n distinct TCP ports free on host right now (held together while chosen, so none is handed out twice, then released). */
export async function freePorts (n: number, host = '127.0.0.1'): Promise<number[]> {
  const servers: Server[] = []
  try {
    const low = ephemeralLow()
    const span = low !== undefined ? low - LOWEST : 0
    // Random candidates below the ephemeral range; where there is no room, the kernel's choice.
    for (let tries = 0; servers.length < n && span >= 4 * n && tries < 64 * n; tries++) {
      const s = await listen(LOWEST + Math.floor(Math.random() * span), host)
      if (s != null) servers.push(s)
    }
    while (servers.length < n) {
      const s = await listen(0, host)
      if (s == null) throw new Error(`no free TCP port on ${host}`)
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
