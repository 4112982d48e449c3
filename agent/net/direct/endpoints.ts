import type { PeerId } from '@libp2p/interface'
import type { Multiaddr } from '@multiformats/multiaddr'
import type { SwarmNode } from '../node.js'
import { isCircuit } from '../reach.js'

/**
 * Hosts at which we can reach a peer's direct data channel: the address of our open libp2p
 * connection to it first (proven reachable), then the TCP addresses the peer store knows.
 */
export async function directHostsOf (node: SwarmNode, peer: PeerId): Promise<string[]> {
  const hosts: string[] = []
  const add = (ma: Multiaddr): void => {
    const host = ipOf(ma)
    if (host != null && !hosts.includes(host)) hosts.push(host)
  }
  const connections = node.getConnections(peer)
  // A relayed connection's address is the relay's, not the peer's; and a peer we reach only
  // through a relay sits behind NAT: its stored (private) addresses would cost a connect
  // timeout per round. Its parts travel over libp2p streams on the relayed connection.
  const direct = connections.filter(c => !isCircuit(c.remoteAddr))
  for (const connection of direct) add(connection.remoteAddr)
  if (hosts.length === 0 && direct.length === connections.length) {
    try {
      for (const { multiaddr } of (await node.peerStore.get(peer)).addresses) add(multiaddr)
    } catch { /* an unknown peer has no stored addresses */ }
  }
  return hosts
}

function ipOf (ma: Multiaddr): string | null {
  for (const component of ma.getComponents()) {
    if ((component.name === 'ip4' || component.name === 'ip6') && component.value != null) {
      return component.value === '0.0.0.0' || component.value === '::' ? null : component.value
    }
  }
  return null
}
