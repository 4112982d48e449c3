import type { PeerId } from '@libp2p/interface'
import type { Multiaddr } from '@multiformats/multiaddr'
import type { SwarmNode } from '../node.js'
import { isCircuit } from '../reach.js'
import type { DataEndpoint } from './data-addrs.js'

/** Where a peer's direct data channel may be, by how we know each address. */
export interface DirectHostSources {
  /** Remote addresses of connections we opened: the peer listens there and we reached it. */
  readonly outbound: readonly string[]
  /** Addresses the peer announces (the peer store, filled by identify and by the messages it sent). */
  readonly announced: readonly string[]
  /**
   * Remote addresses of connections the peer opened to us: where its packets come from, which is
   * where it listens only when it has one address and no NAT in between.
   */
  readonly inbound: readonly string[]
}

/**
 * The order to try a peer's hosts in, each once: the host its last direct channel opened at, then
 * addresses proven by our own dial, then announced ones, then inbound connections' source addresses.
 * A source address first cost a refused dial (or, where SYNs are dropped, the dial's whole bound)
 * before every channel to a peer that had dialled us from another address than it listens at: a
 * node with several addresses, or a peer exposed at a load balancer whose egress is SNATed.
 */
export function orderDirectHosts (sources: DirectHostSources, lastGood?: string): string[] {
  const hosts: string[] = []
  for (const host of [lastGood, ...sources.outbound, ...sources.announced, ...sources.inbound]) {
    if (host != null && !hosts.includes(host)) hosts.push(host)
  }
  return hosts
}

/**
 * Hosts at which we can reach a peer's direct data channel, in orderDirectHosts's order.
 */
export async function directHostsOf (node: SwarmNode, peer: PeerId, lastGood?: string): Promise<string[]> {
  const connections = node.getConnections(peer)
  const direct = connections.filter(c => !isCircuit(c.remoteAddr))
  const hostsOf = (addrs: Multiaddr[]): string[] => addrs.map(ipOf).filter(host => host != null)
  // A relayed connection's address is the relay's, not the peer's; and a peer we reach through a
  // relay sits behind NAT: its stored (private) addresses would cost a connect timeout per round.
  // Only a direct connection to it (a hole punched) says where it can be reached.
  if (direct.length === 0 && connections.length > 0) return []
  let announced: string[] = []
  if (direct.length === connections.length) {
    try {
      announced = hostsOf((await node.peerStore.get(peer)).addresses.map(a => a.multiaddr).filter(a => !isCircuit(a)))
    } catch { /* an unknown peer has no stored addresses */ }
    // A peer on another machine announces its loopback address too: there, our own ports answer.
    if (direct.some(c => !isLoopback(ipOf(c.remoteAddr)))) announced = announced.filter(host => !isLoopback(host))
  }
  return orderDirectHosts({
    outbound: hostsOf(direct.filter(c => c.direction === 'outbound').map(c => c.remoteAddr)),
    announced,
    inbound: hostsOf(direct.filter(c => c.direction === 'inbound').map(c => c.remoteAddr))
  }, lastGood)
}

function ipOf (ma: Multiaddr): string | null {
  for (const component of ma.getComponents()) {
    if ((component.name === 'ip4' || component.name === 'ip6') && component.value != null) {
      return component.value === '0.0.0.0' || component.value === '::' ? null : component.value
    }
  }
  return null
}

function isLoopback (host: string | null): boolean {
  return host != null && (host.startsWith('127.') || host === '::1')
}

/**
 * Host and port pairs to dial a peer's data channel at, in the order of `hosts` (directHostsOf's):
 * each host at the port its data addresses name for it, else at `port` (the one its data channel
 * listens on); then the hosts only its data addresses name (a DNS name in front of a node port).
 */
export function dataEndpoints (hosts: readonly string[], port: number, dataAddrs: readonly DataEndpoint[]): DataEndpoint[] {
  const named = new Map<string, number>()
  for (const e of dataAddrs) if (!named.has(e.host)) named.set(e.host, e.port)
  const out = hosts.map(host => ({ host, port: named.get(host) ?? port }))
  for (const [host, p] of named) if (!hosts.includes(host)) out.push({ host, port: p })
  return out
}

/**
 * Where to dial a peer's direct data channel: directHostsOf's hosts with the ports its data
 * addresses name. Nothing for a peer we reach only through a relay (directHostsOf says why).
 */
export async function directEndpointsOf (node: SwarmNode, peer: PeerId, port: number, dataAddrs: readonly DataEndpoint[], lastGood?: string): Promise<DataEndpoint[]> {
  const connections = node.getConnections(peer)
  if (connections.length > 0 && connections.every(c => isCircuit(c.remoteAddr))) return []
  return dataEndpoints(await directHostsOf(node, peer, lastGood), port, dataAddrs)
}
