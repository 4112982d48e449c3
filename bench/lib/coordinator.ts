import { createServer, type IncomingMessage, type ServerResponse, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { PeerResult } from './protocol.js'

/**
 * The runner's rendezvous for one run of N peer processes, on 127.0.0.1:
 *   POST /register {rank, addr}  -> answers {addrs} once all N ranks registered
 *   POST /barrier  {name}        -> answers {} once all N arrived under that name
 *   POST /result   {PeerResult}  -> answers {} at once
 *   POST /error    {rank, message} -> a peer says why it gives up (shown in the table)
 * Requests are long-polled: a peer's request stays open until the rendezvous completes.
 */
export class Coordinator {
  readonly results = new Map<number, PeerResult>()
  readonly errors = new Map<number, string>()
  private readonly addrs: Array<string | undefined>
  private readonly registerWaiters: ServerResponse[] = []
  private readonly barriers = new Map<string, ServerResponse[]>()
  private server: Server | undefined

  /** Awaited before a barrier opens, while every peer waits at it (the runner samples the wire counters there). */
  beforeBarrierOpens: ((name: string) => Promise<void>) | undefined

  constructor (readonly world: number, private readonly onEvent: (line: string) => void = () => {}) {
    this.addrs = Array.from({ length: world }, () => undefined)
  }

  /** Listens on host (default 127.0.0.1; bench/links.ts: the bridge's address, which every namespace reaches). */
  async start (host = '127.0.0.1'): Promise<string> {
    this.server = createServer((req, res) => { this.handle(req, res).catch((err: Error) => reply(res, 400, { error: err.message })) })
    this.server.keepAliveTimeout = 600_000
    this.server.requestTimeout = 0
    this.server.headersTimeout = 0
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject)
      this.server!.listen(0, host, resolve)
    })
    const { port } = this.server.address() as AddressInfo
    return `http://${host}:${port}`
  }

  async stop (): Promise<void> {
    for (const res of this.registerWaiters) res.destroy()
    for (const waiting of this.barriers.values()) for (const res of waiting) res.destroy()
    this.server?.closeAllConnections()
    await new Promise<void>((resolve) => this.server == null ? resolve() : this.server.close(() => resolve()))
  }

  private async handle (req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJson(req)
    switch (req.url) {
      case '/register': {
        const rank = rankOf(body, this.world)
        if (this.addrs[rank] !== undefined) throw new Error(`rank ${rank} registered twice`)
        this.addrs[rank] = String(body.addr ?? '')
        this.registerWaiters.push(res)
        if (this.registerWaiters.length === this.world) {
          this.onEvent('all peers registered')
          for (const waiter of this.registerWaiters.splice(0)) reply(waiter, 200, { addrs: this.addrs })
        }
        return
      }
      case '/barrier': {
        const name = String(body.name ?? '')
        const waiting = this.barriers.get(name) ?? []
        waiting.push(res)
        this.barriers.set(name, waiting)
        if (waiting.length === this.world) {
          this.barriers.delete(name)
          await this.beforeBarrierOpens?.(name)
          this.onEvent(`${name} open`)
          for (const waiter of waiting) reply(waiter, 200, {})
        }
        return
      }
      case '/result': {
        const rank = rankOf(body, this.world)
        this.results.set(rank, body as unknown as PeerResult)
        reply(res, 200, {})
        return
      }
      case '/error': {
        const rank = rankOf(body, this.world)
        this.errors.set(rank, String(body.message ?? 'unknown error'))
        reply(res, 200, {})
        return
      }
      default:
        reply(res, 404, { error: `no such endpoint ${req.url ?? ''}` })
    }
  }
}

function rankOf (body: Record<string, unknown>, world: number): number {
  const rank = Number(body.rank)
  if (!Number.isInteger(rank) || rank < 0 || rank >= world) throw new Error(`rank must be an integer in [0, ${world}), got ${String(body.rank)}`)
  return rank
}

/** The JSON body of a request (at most 16 MiB); {} when empty. */
export async function readJson (req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of req) {
    size += (chunk as Buffer).length
    if (size > 16 * 1024 * 1024) throw new Error('request body over 16 MiB')
    chunks.push(chunk as Buffer)
  }
  const text = Buffer.concat(chunks).toString('utf8')
  return text === '' ? {} : JSON.parse(text) as Record<string, unknown>
}

/** Answers a (long-polled) request with a JSON body, unless its connection is gone. */
export function reply (res: ServerResponse, status: number, body: unknown): void {
  if (res.destroyed) return
  res.writeHead(status, { 'content-type': 'application/json' })
  res.end(JSON.stringify(body))
}
