import type { PeerId } from '@libp2p/interface'
import type { KadDHT } from '@libp2p/kad-dht'

/**
 * What we use of kad-dht's routing table: its size (gauges, waiting for a table to fill), the peers
 * it holds closest to a key (the rendezvous's replicas), adding a contact (tests) and removing one
 * whose address now answers as another peer (the rendezvous: kad-dht evicts only from full buckets).
 */
export interface KadRoutingTable {
  readonly size: number
  closestPeers (kadId: Uint8Array, options: { count: number }): PeerId[]
  add (peer: PeerId): Promise<void>
  remove (peer: PeerId): Promise<void>
}

/** The @libp2p/kad-dht release this adapter was written against (package.json pins ^16.4.5). */
const WRITTEN_FOR = '@libp2p/kad-dht 16.4.5'

/**
 * The one place that reaches past kad-dht's public API. @libp2p/kad-dht 16 keeps its routing table
 * in a public field of the service object (`routingTable`), but its KadDHT interface declares
 * neither that field nor closestPeers: checked here at each use, so that a release that moves
 * them fails with one sentence instead of an undefined deep inside a round.
 */
export function kadRoutingTable (dht: KadDHT): KadRoutingTable {
  const table = (dht as unknown as { routingTable?: Partial<KadRoutingTable> }).routingTable
  if (table == null || typeof table.size !== 'number' || typeof table.closestPeers !== 'function' || typeof table.add !== 'function' || typeof table.remove !== 'function') {
    throw new Error(`the kad-dht service has no routingTable with size, closestPeers, add and remove, as ${WRITTEN_FOR} had: check agent/net/kad-routing-table.ts against the installed @libp2p/kad-dht`)
  }
  return table as KadRoutingTable
}

/**
 * Removes a contact, and resolves once kad-dht has also untagged it in the peer store: its table
 * does that after the removal without waiting, through a peerStore.merge that re-creates a record we
 * deleted meanwhile (the rendezvous's forget). Waits for the table's 'peer:remove' of that peer, at
 * most maxMs (a peer that was not in the table fires none).
 */
export async function removeContact (dht: KadDHT, peer: PeerId, maxMs = 500): Promise<void> {
  const table = kadRoutingTable(dht)
  const events = (dht as unknown as { routingTable?: { addEventListener?: EventTarget['addEventListener'], removeEventListener?: EventTarget['removeEventListener'] } }).routingTable
  if (typeof events?.addEventListener !== 'function' || typeof events.removeEventListener !== 'function') {
    await table.remove(peer)
    return
  }
  let onRemove: (evt: Event) => void = () => {}
  const untagged = new Promise<void>(resolve => {
    onRemove = (evt: Event) => { if ((evt as CustomEvent<PeerId>).detail?.equals?.(peer) === true) resolve() }
    events.addEventListener!('peer:remove', onRemove)
  })
  let timer: NodeJS.Timeout | undefined
  try {
    await table.remove(peer)
    await Promise.race([untagged, new Promise<void>(resolve => { timer = setTimeout(resolve, maxMs) })])
  } finally {
    clearTimeout(timer)
    events.removeEventListener!('peer:remove', onRemove)
  }
}
