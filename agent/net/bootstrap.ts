import { Resolver } from 'node:dns/promises'
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import { KEEP_ALIVE } from '@libp2p/interface'
import type { SwarmNode } from './node.js'
import { describeError } from '../errors.js'
import { kadRoutingTable } from './kad-routing-table.js'
import type { Log } from '../log.js'

/**
 * Resolves /dns4 and /dns multiaddrs to /ip4 ones, with the given DNS servers when set (the
 * test cluster's and the local runtime's DNS), else the system resolver.
 */
export async function resolveMultiaddr (text: string, dnsServers: readonly string[]): Promise<Multiaddr> {
  const m = /^\/(dns4|dns|dns6)\/([^/]+)(\/.*)$/.exec(text)
  if (m == null) return multiaddr(text)
  const resolver = new Resolver({ timeout: 2000, tries: 2 })
  if (dnsServers.length > 0) resolver.setServers([...dnsServers])
  const [address] = await resolver.resolve4(m[2])
  if (address === undefined) throw new Error(`${m[2]} has no IPv4 address`)
  return multiaddr(`/ip4/${address}${m[3]}`)
}

export interface BootstrapOptions {
  readonly peers: readonly string[]
  readonly dnsServers: readonly string[]
  readonly log: Log
  readonly signal: AbortSignal
  readonly retryMs?: number
  /** Rounds of dials before giving up (false); default: until one answers or the signal aborts. */
  readonly attempts?: number
}

/**
 * Dials every bootstrap peer (ourselves excluded) until at least one answers, retrying with
 * back-off while none does: bootstrap pods may start in any order. Resolves true once connected
 * (or when there is nobody to dial), false if aborted first. The bootstrap peers reached are kept
 * alive (libp2p's KEEP_ALIVE tag): a restarted bootstrap agent is dialled again within seconds
 * (libp2p retries 5 times, 1 to 16 s apart), where it would otherwise be met only when some
 * lookup picked it; a lone bootstrap agent has nobody else to dial, and the swarm's state to load.
 */
export async function connectBootstrap (node: SwarmNode, options: BootstrapOptions): Promise<boolean> {
  const self = node.peerId.toString()
  const targets = options.peers.filter(p => !p.endsWith(`/p2p/${self}`))
  if (targets.length === 0) return true
  let delay = options.retryMs ?? 500
  let attempt = 0
  const attempts = options.attempts ?? Infinity
  while (!options.signal.aborted && attempt < attempts) {
    attempt++
    const results = await Promise.allSettled(targets.map(async (text) => {
      const addr = await resolveMultiaddr(text, options.dnsServers)
      const connection = await node.dial(addr, { signal: AbortSignal.timeout(5000) })
      await node.peerStore.merge(connection.remotePeer, { tags: { [KEEP_ALIVE]: { value: 1 } } }).catch(() => {})
      return text
    }))
    const ok = results.filter(r => r.status === 'fulfilled').length
    if (ok > 0) {
      options.log.info(`connected to ${ok} of ${targets.length} bootstrap peers`)
      return true
    }
    if (attempt === 1 || attempt % 10 === 0) {
      const first = results.find(r => r.status === 'rejected') as PromiseRejectedResult | undefined
      options.log.warn(`no bootstrap peer answered yet (attempt ${attempt}): ${describeError(first?.reason)}`)
    }
    if (attempt >= attempts) break
    await new Promise(resolve => setTimeout(resolve, delay))
    delay = Math.min(delay * 2, 5000)
  }
  return false
}

/** The longest a routing table is waited for to settle. */
export const SETTLE_MAX_MS = 8000

/**
 * After the first bootstrap connection the routing table fills over a few self-queries (kad-dht's
 * refresh runs in the background: refreshRoutingTable returns at once): resolves with its size
 * once it stopped growing for quietMs (or maxMs passed). The agent's readiness waits for it; its
 * first round does not (main.ts joinSwarm): the rendezvous follows the closer peers a key's
 * replicas name, so one peer in the table finds them, and waiting here was a restarted agent's
 * longest wait on its way back into rounds (0.7 s after its trainer registered).
 */
export async function settleRoutingTable (node: SwarmNode, maxMs = SETTLE_MAX_MS, quietMs = 500): Promise<number> {
  const size = (): number => routingTableSize(node)
  const deadline = Date.now() + maxMs
  let last = size()
  let stableSince = Date.now()
  await node.services.dht.refreshRoutingTable().catch(() => {})
  // The node may stop meanwhile (the agent settles while its workload runs): no use waiting then.
  while (Date.now() < deadline && node.status === 'started') {
    await new Promise(resolve => setTimeout(resolve, 200))
    const now = size()
    if (now !== last) { last = now; stableSince = Date.now() } else if (now > 0 && Date.now() - stableSince >= quietMs) break
  }
  return last
}

/** Peers in the node's Kademlia routing table. */
export function routingTableSize (node: SwarmNode): number {
  return kadRoutingTable(node.services.dht).size
}

/**
 * Joins again while the routing table is empty. Under load Identify can time out on the first
 * bootstrap connection: kad-dht never learns the peer speaks our protocol, the table stays empty,
 * and nothing in libp2p retries, so the agent would never find a group (seen in chaos runs).
 * Hanging up makes the next connection run Identify afresh. Returns the table size reached.
 */
export async function rejoinWhileIsolated (node: SwarmNode, options: BootstrapOptions, attempts = 5): Promise<number> {
  let size = routingTableSize(node)
  for (let attempt = 1; size === 0 && attempt <= attempts && options.signal?.aborted !== true; attempt++) {
    options.log.warn(`the routing table is empty (attempt ${attempt} of ${attempts}); reconnecting to the bootstrap peers`)
    for (const peer of node.getPeers()) await node.hangUp(peer).catch(() => {})
    await connectBootstrap(node, options)
    size = await settleRoutingTable(node)
  }
  return size
}

/** The longest a lone bootstrap agent waits for the swarm's agents to reconnect before it looks for the swarm's state. */
export const FIRST_PEER_WAIT_MS = 10_000

/**
 * Resolves once the node's routing table holds a peer (a connection whose Identify told kad-dht
 * about it: the rendezvous asks the table's peers), or after maxMs: a bootstrap agent with no
 * bootstrap peers of its own, restarted, has nobody to ask for the swarm's state until the others
 * dial it again (they keep it alive: connectBootstrap). Resolves whether it got one.
 */
export async function awaitFirstPeer (node: SwarmNode, maxMs = FIRST_PEER_WAIT_MS): Promise<boolean> {
  const deadline = Date.now() + maxMs
  while (routingTableSize(node) === 0) {
    if (Date.now() >= deadline) return false
    await new Promise(resolve => setTimeout(resolve, Math.min(50, deadline - Date.now())))
  }
  return true
}
