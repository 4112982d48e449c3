import { networkInterfaces } from 'node:os'
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import { describeError } from '../errors.js'
import { P2P_CODE } from './rpc.js'
import { RELAY_V2_HOP_CODEC } from './relay.js'
import type { SwarmNode } from './node.js'
import type { Connection } from '@libp2p/interface'
import type { Log } from '../log.js'

/**
 * How this agent can be reached by the swarm:
 * - public: at its own (listen or announce) addresses;
 * - relayed: behind NAT, through a relay slot on a member (its /p2p-circuit address);
 * - unreachable: behind NAT with no relay slot: it may only dial out, so it averages as a client
 *   (until a slot it keeps asking for makes it relayed: agent/main.ts reachSwarm).
 */
export type Reachability =
  | { readonly kind: 'public', readonly why: string }
  | { readonly kind: 'relayed', readonly why: string, readonly relay: string, readonly addrs: readonly string[] }
  | { readonly kind: 'unreachable', readonly why: string }

/**
 * Whether some peer sees us at an address that is not ours (identify's observedAddr), i.e. a
 * NAT rewrote our source address on the way. Chosen over AutoNAT: @libp2p/autonat 3.0.x never
 * tests private addresses (autonat.js skips isPrivate) and confirms one only after 4 dial-backs
 * from distinct peers, so in a private network or a small swarm it never decides. A same-LAN
 * peer sees our real address, so one foreign observation is enough.
 */
export async function natObserved (node: SwarmNode, signal: AbortSignal): Promise<{ behindNat: boolean, observed: string[], errors: string[] }> {
  // Ours: every interface address, not only the listen ones, since an outgoing connection
  // leaves from whichever address the kernel's route picks.
  const own = new Set([...node.getMultiaddrs().map(ipOf), ...Object.values(networkInterfaces()).flat().map(i => i?.address)].filter((ip): ip is string => ip != null))
  const observed: string[] = []
  const errors: string[] = []
  const asked = node.getConnections().filter(c => c.status === 'open' && !isCircuit(c.remoteAddr))
  await Promise.all(asked.map(async connection => {
    try {
      const addr = await observedOn(node, connection, signal)
      if (addr !== undefined) observed.push(addr.toString())
    } catch (err) {
      errors.push(describeError(err)) // a peer that does not answer tells us nothing
    }
  }))
  const ips = observed.map(a => ipOf(multiaddr(a))).filter((ip): ip is string => ip != null)
  return { behindNat: ips.some(ip => !own.has(ip)), observed, errors }
}

/**
 * Reserves a slot on the first connected member that runs a relay (its identify lists the hop
 * protocol): the circuit transport then listens on <relay>/p2p-circuit and libp2p announces
 * that address (identify push, the DHT). Returns the relay's id and our new addresses.
 */
export async function reserveRelaySlot (node: SwarmNode, log: Log, asked?: { relays: number }): Promise<{ relay: string, addrs: string[] } | undefined> {
  for (const connection of node.getConnections()) {
    if (connection.status !== 'open' || isCircuit(connection.remoteAddr)) continue
    const peer = connection.remotePeer
    const protocols: string[] = await node.peerStore.get(peer).then(p => p.protocols, () => [])
    if (!protocols.includes(RELAY_V2_HOP_CODEC)) continue
    const at = multiaddr(`${connection.remoteAddr.decapsulateCode(P2P_CODE).toString()}/p2p/${peer.toString()}/p2p-circuit`)
    // Set first: the address update that follows the reservation must already leave them out.
    node.services.internals.announceRelayOnly(true)
    if (asked !== undefined) asked.relays++
    try {
      await node.services.internals.transportManager.listen([at])
    } catch (err) {
      log.warn(`relay ${peer.toString()} refused a slot: ${describeError(err)}`)
    }
    const addrs = circuitAddrs(node).filter(a => a.includes(peer.toString()))
    if (addrs.length > 0) return { relay: peer.toString(), addrs }
    node.services.internals.announceRelayOnly(false)
  }
  return undefined
}

/** Our /p2p-circuit addresses (a live relay slot), as strings. */
export function circuitAddrs (node: SwarmNode): string[] {
  return node.getMultiaddrs().filter(isCircuit).map(String)
}

/**
 * Decides how the swarm reaches us, reserving a relay slot when we are behind NAT.
 * `setting` is AVS_REACHABILITY; with announce addresses (the operator exposed the agent) or no
 * bootstrap peers (we are the one others start from) auto means public.
 */
export async function establishReachability (node: SwarmNode, setting: 'auto' | 'public' | 'private', context: { announced: boolean, bootstrapped: boolean }, log: Log): Promise<Reachability> {
  const reach = await decideReachability(node, setting, context, log)
  if (reach.kind === 'public') {
    // Reached at our own address: announce it, also where it is a public IP (NodeInternals says why).
    const confirmed = node.services.internals.confirmListenAddrs()
    if (confirmed.length > 0) log.info(`announcing our public listen address${confirmed.length > 1 ? 'es' : ''} ${confirmed.map(String).join(', ')}`)
  }
  return reach
}

async function decideReachability (node: SwarmNode, setting: 'auto' | 'public' | 'private', context: { announced: boolean, bootstrapped: boolean }, log: Log): Promise<Reachability> {
  if (setting === 'public') return { kind: 'public', why: 'AVS_REACHABILITY=public' }
  let why = 'AVS_REACHABILITY=private'
  if (setting === 'auto') {
    if (context.announced) return { kind: 'public', why: 'announce addresses are set' }
    if (!context.bootstrapped) return { kind: 'public', why: 'no bootstrap peers: others start from this agent' }
    const { behindNat, observed, errors } = await natObserved(node, AbortSignal.timeout(5000))
    if (!behindNat) return { kind: 'public', why: observed.length > 0 ? `peers see it at its own address (${observed[0]})` : `no peer reported an observed address${errors.length > 0 ? ` (${errors.join('; ')})` : ''}` }
    why = `peers see it at ${observed.join(', ')}, not at its own address (NAT)`
  } else {
    // A relay is told by the protocols its identify lists, and right after joining libp2p's own
    // identify may not have run yet: AVS_REACHABILITY=private found no relay and averaged as a
    // client for good (test/reliability/relay-long-down.test.ts, on loopback). Identify first, as
    // auto does to learn the observed address.
    await natObserved(node, AbortSignal.timeout(5000))
  }
  const slot = await reserveRelaySlot(node, log)
  if (slot !== undefined) return { kind: 'relayed', why, relay: slot.relay, addrs: slot.addrs }
  return { kind: 'unreachable', why: `${why}; no member relay gave it a slot` }
}

/** How long libp2p's own identify of a new connection is waited for before we ask ourselves. */
const OWN_IDENTIFY_WAIT_MS = 1000

/**
 * The address a connection's peer sees us at: from the identify libp2p ran as the connection
 * opened (waited for up to OWN_IDENTIFY_WAIT_MS), else from one we run ourselves.
 */
async function observedOn (node: SwarmNode, connection: Connection, signal: AbortSignal): Promise<Multiaddr | undefined> {
  const waitUntil = Date.now() + OWN_IDENTIFY_WAIT_MS
  for (;;) {
    const identified = node.services.internals.identified(connection.id)
    if (identified !== undefined) return identified.observedAddr
    if (Date.now() >= waitUntil || signal.aborted || connection.status !== 'open') break
    await new Promise(resolve => setTimeout(resolve, 10))
  }
  // The peer takes one identify stream at a time (it closes ours unread while libp2p's own runs): ask again a moment later.
  for (let attempt = 1; ; attempt++) {
    try {
      return (await node.services.identify.identify(connection, { signal })).observedAddr
    } catch (err) {
      if (attempt === 4 || signal.aborted) throw err
      await new Promise(resolve => setTimeout(resolve, 250 * attempt))
    }
  }
}

function ipOf (ma: Multiaddr): string | null {
  for (const c of ma.getComponents()) if ((c.name === 'ip4' || c.name === 'ip6') && c.value != null) return c.value
  return null
}

/** A relayed (/p2p-circuit) address: the connection runs through a relay. */
export function isCircuit (ma: Multiaddr): boolean {
  return ma.getComponents().some(c => c.name === 'p2p-circuit')
}

/**
 * The averaging mode an agent runs in once it knows how it is reached: one nobody can dial
 * becomes a client (sends, receives means, reduces nothing), which its join requests announce,
 * so no leader makes it a reducer and nobody asks it to lead. Auxiliary peers only reduce, so an
 * unreachable one is of no use either way and keeps its mode (main.ts warns).
 */
export function modeFor<M extends 'node' | 'client' | 'auxiliary'> (reach: Reachability, mode: M): M | 'client' {
  return reach.kind === 'unreachable' && mode === 'node' ? 'client' : mode
}
