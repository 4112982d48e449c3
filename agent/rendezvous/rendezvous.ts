import { sha256 } from 'multiformats/hashes/sha2'
import type { PeerId } from '@libp2p/interface'
import type { SwarmNode } from '../net/node.js'
import { RendezvousRequest, RendezvousResponse, type RendezvousEntry } from '../proto/averaging.js'
import { callUnary, handleUnary, peerIdFromBytes, peerIdToBytes } from '../net/rpc.js'
import { DictionaryStore, mergeEntries, type StoredEntry } from './store.js'
import { describeError } from '../errors.js'
import { connectPatiently } from './connect.js'

export const RENDEZVOUS_PROTOCOL = '/avs/rendezvous/1.0.0'
const MAX_REQUEST_BYTES = 16 * 1024
const MAX_RESPONSE_BYTES = 4 * 1024 * 1024
/** Replicas per key, like hivemind's num_replicas (5); 3 is enough on swarms of tens to thousands. */
const REPLICAS = 3
const CLOSEST_CACHE_MS = 60_000
const SUSPECT_MS = 30_000
/** A settled find waits this many request timeouts at most for the key's network lookup. */
const SETTLE_REQUEST_TIMEOUTS = 3
/** Addresses kept per entry, and the longest one accepted. */
const MAX_ADDRS = 16
const MAX_ADDR_BYTES = 256

export interface RendezvousOptions {
  readonly requestTimeoutMs: number
  readonly now?: () => number
  readonly log?: (msg: string) => void
  readonly observer?: RendezvousObserver
}

/** Sees every exchange with a key's replicas and every network lookup of a key's closest peers (the scale harness). */
export interface RendezvousObserver {
  exchange?: (outcome: { readonly key: string, readonly ms: number, readonly replicas: number, readonly failed: number }) => void
  lookup?: (outcome: { readonly key: string, readonly ms: number, readonly found: number, readonly ok: boolean }) => void
}

/**
 * hivemind's DHT dictionary values on top of js-libp2p's Kademlia: kad-dht finds the peers
 * closest to a key, and this small protocol stores (peer -> expiring entry) dictionaries on them.
 * js kad-dht keeps one record per key and cannot merge per-subkey expirations, which matchmaking
 * needs (many peers declaring under one group key, each with its own expiration).
 */
export class Rendezvous {
  readonly store = new DictionaryStore()
  private readonly closestCache = new Map<string, { peers: PeerId[], at: number, pending?: Promise<void> }>()
  /** Replicas that just failed (a dead peer lingers in routing tables): skipped for a while. */
  private readonly suspects = new Map<string, number>()
  private readonly now: () => number
  private pruneTimer: NodeJS.Timeout | undefined

  constructor (private readonly node: SwarmNode, private readonly options: RendezvousOptions) {
    this.now = options.now ?? (() => Date.now() / 1000)
  }

  async start (): Promise<void> {
    await handleUnary(this.node, RENDEZVOUS_PROTOCOL, async (bytes, from) => await this.serve(bytes, from), {
      maxRequestBytes: MAX_REQUEST_BYTES,
      timeoutMs: this.options.requestTimeoutMs,
      // A peer has a few keys in flight per round (declare, find, donor announcements), but libp2p's
      // per-connection count holds streams until both sides closed them: at 64 a 16-peer Moshpit
      // grid in one process saw replicas refuse streams in negotiation and matchmaking fail. The
      // per-peer bound below is what limits one peer.
      maxInboundStreams: 256,
      maxStreamsPerPeer: 32
    })
    this.pruneTimer = setInterval(() => { this.store.prune(this.now()) }, 10_000)
    this.pruneTimer.unref()
  }

  async stop (): Promise<void> {
    clearInterval(this.pruneTimer)
    await this.node.unhandle(RENDEZVOUS_PROTOCOL).catch(() => {})
  }

  /** Stores our entry under the key on its replicas and returns what they hold afterwards. */
  async declare (key: string, entry: StoredEntry): Promise<StoredEntry[]> {
    return await this.exchange(key, entry)
  }

  /**
   * What the key's replicas hold. `settled` waits (a bounded while) for the network lookup of the
   * key's closest peers first: for a one-off question of a peer that just joined, whose routing
   * table may hold only its bootstrap peers, which need not be the key's replicas (seen: a
   * restarted agent found no state donor in a swarm full of them).
   */
  async find (key: string, options: { settled?: boolean } = {}): Promise<StoredEntry[]> {
    return await this.exchange(key, undefined, options.settled === true)
  }

  private async exchange (key: string, entry: StoredEntry | undefined, settled = false): Promise<StoredEntry[]> {
    const started = performance.now()
    const replicas = await this.replicasFor(key, settled)
    const request = RendezvousRequest.encode({ key, store: entry != null ? toWire(entry) : undefined })
    const answers: Array<StoredEntry[] | undefined> = replicas.map(() => undefined)
    let failed = 0
    const calls = replicas.map(async ({ peer }, i) => {
      try {
        answers[i] = await this.ask(peer, key, entry, request)
        this.suspects.delete(peer.toString())
      } catch (err) {
        failed++
        this.suspects.set(peer.toString(), Date.now() + SUSPECT_MS)
        this.options.log?.(`rendezvous replica ${peer.toString()} failed: ${describeError(err)}`)
      }
    })
    // A suspect is still asked (it may be merely slow, and peers that trust it read from it) but
    // not waited for: the exchange ends with the trusted replicas' answers, and a dead replica
    // costs nobody a request timeout per exchange.
    const trusted = calls.filter((_, i) => !replicas[i].suspect)
    await Promise.all(trusted.length > 0 ? trusted : calls)
    const lists = answers.filter((a): a is StoredEntry[] => a != null)
    this.options.observer?.exchange?.({ key, ms: performance.now() - started, replicas: replicas.length, failed })
    return mergeEntries(lists)
  }

  private async ask (peer: PeerId, key: string, entry: StoredEntry | undefined, request: Uint8Array): Promise<StoredEntry[]> {
    if (peer.equals(this.node.peerId)) return this.serveLocally(key, entry)
    await connectPatiently(this.node, peer, this.options.requestTimeoutMs)
    const bytes = await callUnary(this.node, peer, RENDEZVOUS_PROTOCOL, request, {
      timeoutMs: this.options.requestTimeoutMs, maxFrameBytes: MAX_RESPONSE_BYTES
    })
    const response = RendezvousResponse.decode(bytes)
    if (response.error !== '') throw new Error(response.error)
    const entries: StoredEntry[] = []
    for (const wire of response.entries) {
      const parsed = fromWire(wire)
      if (parsed != null) entries.push(parsed)
    }
    return entries
  }

  private serveLocally (key: string, entry: StoredEntry | undefined): StoredEntry[] {
    const now = this.now()
    if (entry != null) this.store.put(key, entry, now)
    return this.store.get(key, now)
  }

  private async serve (bytes: Uint8Array, from: PeerId): Promise<Uint8Array> {
    const request = RendezvousRequest.decode(bytes)
    if (request.key.length === 0 || request.key.length > 512) return RendezvousResponse.encode({ entries: [], error: 'key must be 1 to 512 characters' })
    let entry: StoredEntry | undefined
    if (request.store != null) {
      const parsed = fromWire(request.store)
      // A peer may only write its own entry: the connection authenticated who it is.
      if (parsed == null || parsed.peerId !== from.toString()) {
        return RendezvousResponse.encode({ entries: [], error: 'an entry must name the peer that stores it' })
      }
      entry = parsed
    }
    const entries = this.serveLocally(request.key, entry)
    return RendezvousResponse.encode({ entries: entries.map(toWire) })
  }

  /**
   * The REPLICAS peers closest to the key by Kademlia distance, ourselves included when we are
   * among them, and for each of them that failed us lately (a suspect) the next closest peer that
   * did not. Every peer of a key thus writes and reads the same closest replicas, plus extras where
   * it distrusts one: sets overlap whatever each peer suspects. (Replacing suspects instead, as
   * before, let peers whose replicas were slow under load drift onto sets of their own and never
   * meet: 16 peers in one process formed groups of 2 and 3 and left peers alone.) The local routing
   * table answers at once (and exactly, on swarms within one k-bucket's reach); a network lookup,
   * too slow to wait for, refines the set in the background for later rounds on the same key.
   */
  private async replicasFor (key: string, settled = false): Promise<Array<{ peer: PeerId, suspect: boolean }>> {
    const keyBytes = new TextEncoder().encode(key)
    const target = (await sha256.digest(keyBytes)).digest
    // Without the lookup, peers whose tables hold different subsets of a swarm write and read one
    // key on different replicas (seen: 16 peers on a 4x4 Moshpit grid forming groups of 2 and 3).
    this.refreshClosest(key, keyBytes)
    if (settled) await this.settleLookup(key)
    const cached = this.closestCache.get(key)
    const table = (this.node.services.dht as unknown as { routingTable?: { closestPeers: (id: Uint8Array, o: { count: number }) => PeerId[] } }).routingTable
    const candidates: PeerId[] = [this.node.peerId, ...(table?.closestPeers(target, { count: REPLICAS * 3 }) ?? []), ...(cached?.peers ?? [])]
    const scored = await Promise.all(candidates.map(async (peer) => ({ peer, id: (await sha256.digest(peer.toMultihash().bytes)).digest })))
    scored.sort((a, b) => compareXor(a.id, b.id, target))
    const chosen: Array<{ peer: PeerId, suspect: boolean }> = []
    const now = Date.now()
    let extras = 0
    for (const { peer } of scored) {
      if (chosen.some(c => c.peer.equals(peer))) continue
      const suspect = (this.suspects.get(peer.toString()) ?? 0) > now
      if (chosen.length < REPLICAS) {
        chosen.push({ peer, suspect })
        if (suspect) extras++
      } else if (extras === 0) {
        break
      } else if (!suspect) {
        chosen.push({ peer, suspect })
        extras--
      }
    }
    return chosen
  }

  /** Starts finding a key's closest peers ahead of its first use (e.g. the next round's group key). */
  prefetch (key: string): void {
    this.refreshClosest(key, new TextEncoder().encode(key))
  }

  /** Waits for the key's pending lookup, at most a few request timeouts (a lookup ends at 30 s). */
  private async settleLookup (key: string): Promise<void> {
    const pending = this.closestCache.get(key)?.pending
    if (pending == null) return
    let timer: NodeJS.Timeout | undefined
    const bound = new Promise<void>(resolve => { timer = setTimeout(resolve, SETTLE_REQUEST_TIMEOUTS * this.options.requestTimeoutMs) })
    await Promise.race([pending, bound]).finally(() => { clearTimeout(timer) })
  }

  private refreshClosest (key: string, keyBytes: Uint8Array): void {
    const cached = this.closestCache.get(key)
    if (cached != null && Date.now() - cached.at <= CLOSEST_CACHE_MS) return
    if (cached == null && this.closestCache.size >= 1024) this.closestCache.delete(this.closestCache.keys().next().value as string)
    const entry: { peers: PeerId[], at: number, pending?: Promise<void> } = { peers: cached?.peers ?? [], at: Date.now() }
    this.closestCache.set(key, entry)
    entry.pending = this.lookupClosest(key, keyBytes)
  }

  private async lookupClosest (key: string, keyBytes: Uint8Array): Promise<void> {
    const found: PeerId[] = []
    const started = performance.now()
    try {
      for await (const info of this.node.peerRouting.getClosestPeers(keyBytes, { signal: AbortSignal.timeout(30_000) })) found.push(info.id)
      this.closestCache.set(key, { peers: found, at: Date.now() })
      this.options.observer?.lookup?.({ key, ms: performance.now() - started, found: found.length, ok: true })
    } catch (err) {
      this.options.log?.(`closest-peer lookup for ${key} failed: ${describeError(err)}`)
      this.options.observer?.lookup?.({ key, ms: performance.now() - started, found: found.length, ok: false })
    }
  }
}

function compareXor (a: Uint8Array, b: Uint8Array, target: Uint8Array): number {
  for (let i = 0; i < target.length; i++) {
    const da = a[i] ^ target[i]
    const db = b[i] ^ target[i]
    if (da !== db) return da - db
  }
  return 0
}

function toWire (entry: StoredEntry): RendezvousEntry {
  return {
    peerId: peerIdToBytes(entry.peerId),
    expiration: entry.expiration,
    looking: entry.looking,
    priority: entry.priority,
    addrs: entry.addrs.slice(0, MAX_ADDRS) as Array<Uint8Array<ArrayBuffer>>
  }
}

function fromWire (wire: RendezvousEntry): StoredEntry | null {
  if (!Number.isFinite(wire.expiration) || !Number.isFinite(wire.priority)) return null
  try {
    const peer = peerIdFromBytes(wire.peerId)
    // A multiaddr of a real transport is tens of bytes: longer ones only inflate what replicas hold.
    const addrs = wire.addrs.filter(a => a.byteLength <= MAX_ADDR_BYTES).slice(0, MAX_ADDRS)
    return { peerId: peer.toString(), expiration: wire.expiration, looking: wire.looking, priority: wire.priority, addrs }
  } catch {
    return null
  }
}
