/**
 * Data addresses: where a peer's direct data channel is reached at another port than the one it
 * listens on, by host (a Kubernetes node port, a router's port forward). The operator writes them
 * into the announce file (`data=` entries), the agent sends them with its data port (PeerInfo and
 * state-donor entries: `data_addrs`), and peers dial each host at the port named for it
 * (./endpoints.ts). Here: their form, their bounds, and their bytes on the wire.
 */
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'

/** Where a peer's direct data channel is dialled. */
export interface DataEndpoint { readonly host: string, readonly port: number }

/**
 * At most this many data addresses are sent or taken from a peer: the operator names one per node
 * address (a node's ExternalIPs), a handful; each costs a failed dial at worst.
 */
export const MAX_DATA_ADDRS = 8
const MAX_DATA_ADDR_BYTES = 256
const HOST_PROTOCOLS = new Set(['ip4', 'ip6', 'dns', 'dns4', 'dns6'])

/**
 * The host and port of one data address, `/ip4|ip6|dns|dns4|dns6/<host>/tcp/<port>` and nothing
 * more, or a sentence saying why it is not one. A data address names where a peer's data port is
 * reached at another port than its own: a Kubernetes node port or a router's port forward.
 */
export function dataEndpointOf (ma: Multiaddr): DataEndpoint | string {
  const c = ma.getComponents()
  if (c.length !== 2 || !HOST_PROTOCOLS.has(c[0].name) || c[0].value == null || c[1].name !== 'tcp') return `${ma.toString()} is not a /ip4, /ip6 or /dns host with a /tcp port`
  const port = Number(c[1].value)
  if (!Number.isInteger(port) || port < 1 || port > 65535) return `${ma.toString()} has no TCP port from 1 to 65535`
  return { host: c[0].value, port }
}

/**
 * A peer's data addresses from the wire (PeerInfo, rendezvous entries): at most MAX_DATA_ADDRS,
 * each bounded in size; what is not a data address is skipped, so a hostile peer can only
 * name hosts to be dialled, as its libp2p addresses already do.
 */
export function dataEndpointsFromWire (wire: readonly Uint8Array[] | undefined): DataEndpoint[] {
  const out: DataEndpoint[] = []
  for (const bytes of (wire ?? []).slice(0, MAX_DATA_ADDRS)) {
    if (bytes.byteLength > MAX_DATA_ADDR_BYTES) continue
    try {
      const e = dataEndpointOf(multiaddr(bytes))
      if (typeof e !== 'string') out.push(e)
    } catch { /* not a multiaddr */ }
  }
  return out
}

/** Our data addresses for the wire. */
export function dataAddrsToWire (addrs: readonly Multiaddr[]): Array<Uint8Array<ArrayBuffer>> {
  return addrs.slice(0, MAX_DATA_ADDRS).map(a => a.bytes as Uint8Array<ArrayBuffer>)
}
