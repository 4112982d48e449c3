import type { Connection } from '@libp2p/interface'
import { isCircuit } from './reach.js'
import type { SwarmNode } from './node.js'

/** How a connection reaches its peer: straight, straight after a hole punch, or through a relay. */
export type ConnectionKind = 'direct' | 'hole-punched' | 'relayed'
export const CONNECTION_KINDS: readonly ConnectionKind[] = ['direct', 'hole-punched', 'relayed']

/** A direct connection opened this soon after a relayed one to the same peer is DCUtR's work. */
const PUNCH_WINDOW_MS = 30_000

/**
 * Sorts every connection the node opens by kind, from libp2p's connection events: relayed ones
 * run over /p2p-circuit; a direct one to a peer we held a relayed connection to moments before
 * is a hole punch (DCUtR dials it while the relayed one is open, then closes that one).
 */
export class ConnectionKinds {
  readonly opened: Record<ConnectionKind, number> = { direct: 0, 'hole-punched': 0, relayed: 0 }
  private readonly live = new Map<string, ConnectionKind>()
  private readonly lastRelayed = new Map<string, number>()

  constructor (private readonly node: SwarmNode, private readonly onChange?: (open: Record<ConnectionKind, number>, opened: ConnectionKind) => void) {
    node.addEventListener('connection:open', this.onOpen)
    node.addEventListener('connection:close', this.onClose)
    for (const c of node.getConnections()) this.add(c)
  }

  /** Open connections by kind now. */
  open (): Record<ConnectionKind, number> {
    const out: Record<ConnectionKind, number> = { direct: 0, 'hole-punched': 0, relayed: 0 }
    for (const kind of this.live.values()) out[kind]++
    return out
  }

  /** The kind of our open connections to one peer, the best first (for logs). */
  kindsOf (peer: string): ConnectionKind[] {
    return this.node.getConnections().filter(c => c.remotePeer.toString() === peer).map(c => this.live.get(c.id) ?? 'direct')
  }

  stop (): void {
    this.node.removeEventListener('connection:open', this.onOpen)
    this.node.removeEventListener('connection:close', this.onClose)
  }

  private readonly onOpen = (evt: CustomEvent<Connection>): void => { this.add(evt.detail) }
  private readonly onClose = (evt: CustomEvent<Connection>): void => { this.live.delete(evt.detail.id) }

  private add (c: Connection): void {
    if (this.live.has(c.id)) return
    const peer = c.remotePeer.toString()
    let kind: ConnectionKind
    if (isCircuit(c.remoteAddr)) {
      kind = 'relayed'
      this.lastRelayed.set(peer, Date.now())
    } else {
      const relayedAt = this.lastRelayed.get(peer)
      const relayedOpen = this.node.getConnections(c.remotePeer).some(o => o.id !== c.id && isCircuit(o.remoteAddr))
      kind = relayedOpen || (relayedAt !== undefined && Date.now() - relayedAt < PUNCH_WINDOW_MS) ? 'hole-punched' : 'direct'
    }
    this.live.set(c.id, kind)
    this.opened[kind]++
    this.onChange?.(this.open(), kind)
  }
}
