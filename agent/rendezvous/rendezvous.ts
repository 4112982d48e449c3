import { sha256 } from 'multiformats/hashes/sha2'
import type { IdentifyResult, PeerId, PeerUpdate } from '@libp2p/interface'
import type { SwarmNode } from '../net/node.js'
import { RendezvousRequest, RendezvousResponse, type RendezvousEntry } from '../proto/averaging.js'
import { callUnary, handleUnary, peerIdFromBytes, peerIdToBytes } from '../net/rpc.js'
import { DictionaryStore, mergeEntries, type StoredEntry } from './store.js'
import { describeError } from '../errors.js'

export const RENDEZVOUS_PROTOCOL = '/avs/rendezvous/1.0.0'
const MAX_REQUEST_BYTES = 16 * 1024
const MAX_RESPONSE_BYTES = 4 * 1024 * 1024
/** Replicas per key, like hivemind's num_replicas (5); 3 is enough on swarms of tens to thousands. */
const REPLICAS = 3
const CLOSEST_CACHE_MS = 60_000
const LOOKUP_MIN_MS = 3000
const SUSPECT_MS = 30_000
/** Peers found by any network lookup, kept as replica candidates for every key (bounded, aging out). */
const KNOWN_PEERS_MAX = 1024
const KNOWN_PEERS_MS = 10 * 60_000
const MAX_OWN_ENTRIES = 256
/** kad-dht's k (bucket size, peers a lookup returns). */
const KAD_K = 20
/** Addresses kept per entry, and the longest one accepted. */
const MAX_ADDRS = 16
const MAX_ADDR_BYTES = 256

export interface RendezvousOptions {
  readonly requestTimeoutMs: number
  readonly now?: () => number
  readonly log?: (msg: string) => void
}

/**
 * hivemind's DHT dictionary values on top of js-libp2p's Kademlia: kad-dht finds the peers
 * closest to a key, and this small protocol stores (peer -> expiring entry) dictionaries on them.
 * js kad-dht keeps one record per key and cannot merge per-subkey expirations, which matchmaking
 * needs (many peers declaring under one group key, each with its own expiration).
 */
export class Rendezvous {
  readonly store = new DictionaryStore()
  private readonly closestCache = new Map<string, ClosestEntry>()
  /** Between two lookups of one key: LOOKUP_MIN_MS while lookups find new peers, doubling to CLOSEST_CACHE_MS. */
  private lookupEveryMs = LOOKUP_MIN_MS
  /** Replicas that just failed (a dead peer lingers in routing tables): skipped for a while. */
  private readonly suspects = new Map<string, number>()
  /** Closest-peer lookups finished so far (see settle). */
  private lookupsDone = 0
  private lastLookup: { found: number, at: number } | null = null
  /** Our latest entry per key (see find). */
  private readonly ownEntries = new Map<string, StoredEntry>()
  /**
   * Every peer a closest-peer lookup returned, for any key, and every peer that identified as serving
   * rendezvous, with its Kademlia id. In a swarm within a lookup's reach (k = 20) this soon holds
   * everyone, so every key's replica set is the same on every peer, the next round's keys included,
   * without waiting for their own lookups. Peers not heard of for a while and not connected age out.
   */
  private readonly knownPeers = new Map<string, { peer: PeerId, id: Uint8Array, at: number }>()
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
    this.node.addEventListener('peer:identify', this.onIdentify)
    this.node.addEventListener('peer:update', this.onUpdate)
    for (const peer of await this.node.peerStore.all().catch(() => [])) {
      if (peer.protocols.includes(RENDEZVOUS_PROTOCOL)) await this.remember(peer.id)
    }
  }

  // Every peer that says it serves rendezvous (at its first connection, or later through identify
  // push once its agent started) is a replica candidate: peers learn of each other as they connect.
  private readonly onIdentify = (event: CustomEvent<IdentifyResult>): void => {
    if (event.detail.protocols.includes(RENDEZVOUS_PROTOCOL)) void this.remember(event.detail.peerId)
  }

  private readonly onUpdate = (event: CustomEvent<PeerUpdate>): void => {
    const peer = event.detail.peer
    if (peer.protocols.includes(RENDEZVOUS_PROTOCOL) && !this.knownPeers.has(peer.id.toString())) void this.remember(peer.id)
  }

  async stop (): Promise<void> {
    this.node.removeEventListener('peer:identify', this.onIdentify)
    this.node.removeEventListener('peer:update', this.onUpdate)
    clearInterval(this.pruneTimer)
    await this.node.unhandle(RENDEZVOUS_PROTOCOL).catch(() => {})
  }

  /** Stores our entry under the key on its replicas and returns what they hold afterwards. */
  async declare (key: string, entry: StoredEntry): Promise<StoredEntry[]> {
    const held = this.ownEntries.get(key)
    if (held == null || entry.expiration >= held.expiration) {
      this.ownEntries.delete(key)
      if (this.ownEntries.size >= MAX_OWN_ENTRIES) this.ownEntries.delete(this.ownEntries.keys().next().value as string)
      this.ownEntries.set(key, entry)
    }
    return await this.exchange(key, entry)
  }

  /**
   * What the key's replicas hold. Our own live entry under the key travels with the request: when
   * our view of the swarm changed since we declared (a young swarm, a lookup that just finished),
   * the replicas we read from now also learn about us. Replicas keep the later expiration, so
   * the repeat is harmless where the entry already is.
   */
  async find (key: string): Promise<StoredEntry[]> {
    const own = this.ownEntries.get(key)
    if (own != null && own.expiration <= this.now()) this.ownEntries.delete(key)
    return await this.exchange(key, own != null && own.expiration > this.now() ? own : undefined)
  }

  private async exchange (key: string, entry: StoredEntry | undefined): Promise<StoredEntry[]> {
    const replicas = await this.replicasFor(key)
    const request = RendezvousRequest.encode({ key, store: entry != null ? toWire(entry) : undefined })
    const lists: StoredEntry[][] = []
    await Promise.all(replicas.map(async (peer) => {
      try {
        lists.push(await this.ask(peer, key, entry, request))
        this.suspects.delete(peer.toString())
      } catch (err) {
        this.suspects.set(peer.toString(), Date.now() + SUSPECT_MS)
        this.options.log?.(`rendezvous replica ${peer.toString()} failed: ${describeError(err)}`)
      }
    }))
    return mergeEntries(lists)
  }

  private async ask (peer: PeerId, key: string, entry: StoredEntry | undefined, request: Uint8Array): Promise<StoredEntry[]> {
    if (peer.equals(this.node.peerId)) return this.serveLocally(key, entry)
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
   * among them, skipping replicas that just failed. Candidates: the local routing table (answers
   * at once, but in a young swarm each peer's table holds a different subset) and every peer that
   * lookups found or that identified as serving rendezvous (see knownPeers). Without the latter,
   * peers declared one key on different replicas and never met (seen: 16 peers on a 4x4 Moshpit
   * grid forming groups of 2 and 3, in round 1 and again under round 2's new keys).
   */
  private async replicasFor (key: string): Promise<PeerId[]> {
    const keyBytes = new TextEncoder().encode(key)
    const target = (await sha256.digest(keyBytes)).digest
    this.refreshClosest(key, keyBytes)
    const table = (this.node.services.dht as unknown as { routingTable?: { closestPeers: (id: Uint8Array, o: { count: number }) => PeerId[] } }).routingTable
    const byId = new Map<string, { peer: PeerId, id: Uint8Array }>()
    const add = async (peer: PeerId): Promise<void> => {
      const name = peer.toString()
      if (!byId.has(name)) byId.set(name, { peer, id: this.knownPeers.get(name)?.id ?? await kadId(peer) })
    }
    await add(this.node.peerId)
    for (const peer of table?.closestPeers(target, { count: REPLICAS * 2 }) ?? []) await add(peer)
    const now = Date.now()
    for (const [name, known] of this.knownPeers) {
      if (now - known.at > KNOWN_PEERS_MS && this.node.getConnections(known.peer).length === 0) { this.knownPeers.delete(name); continue }
      if (!byId.has(name)) byId.set(name, known)
    }
    const sorted = [...byId.values()].sort((a, b) => compareXor(a.id, b.id, target)).map(c => c.peer)
    return sorted.filter(peer => peer.equals(this.node.peerId) || !((this.suspects.get(peer.toString()) ?? 0) > now)).slice(0, REPLICAS)
  }

  /**
   * Waits, at most maxMs, until this node has finished one closest-peer lookup (this key's, started
   * here if need be). Only a node that has none yet waits: its routing table may hold just the
   * bootstrap peer, and a first declaration from there lands on replicas nobody else uses (seen:
   * 16 fresh peers on a 4x4 grid, each with a different replica set for its key). Afterwards the
   * known peers serve every key at once.
   */
  async settle (key: string, maxMs: number): Promise<void> {
    this.refreshClosest(key, new TextEncoder().encode(key))
    if (this.lookupsDone > 0 || maxMs <= 0) return
    const pending = this.closestCache.get(key)?.pending
    if (pending == null) return
    let timer: NodeJS.Timeout | undefined
    await Promise.race([pending, new Promise<void>(resolve => { timer = setTimeout(resolve, maxMs) })])
    clearTimeout(timer)
  }

  /** Starts finding a key's closest peers ahead of its first use (e.g. the next round's group key). */
  prefetch (key: string): void {
    this.refreshClosest(key, new TextEncoder().encode(key))
  }

  private refreshClosest (key: string, keyBytes: Uint8Array): void {
    const cached = this.closestCache.get(key)
    const now = Date.now()
    if (cached != null && (cached.inFlight || now - cached.at <= this.lookupEveryMs)) return
    // A lookup that found fewer peers than Kademlia's k found the whole swarm: the known peers
    // already hold every key's replicas, and on a loaded machine each lookup costs seconds of CPU
    // across the swarm (kad-dht FIND_NODE), so one per interval serves all keys.
    if (this.lastLookup != null && this.lastLookup.found < KAD_K && now - this.lastLookup.at <= this.lookupEveryMs) return
    if (cached == null && this.closestCache.size >= 1024) this.closestCache.delete(this.closestCache.keys().next().value as string)
    const entry: ClosestEntry = { peers: cached?.peers ?? [], at: now, inFlight: true }
    this.closestCache.set(key, entry)
    entry.pending = this.lookupClosest(key, keyBytes).finally(() => { entry.inFlight = false })
  }

  private async lookupClosest (key: string, keyBytes: Uint8Array): Promise<void> {
    const found: PeerId[] = []
    try {
      for await (const info of this.node.peerRouting.getClosestPeers(keyBytes, { signal: AbortSignal.timeout(30_000) })) found.push(info.id)
      const knownBefore = this.knownPeers.size
      for (const peer of found) await this.remember(peer)
      const entry = this.closestCache.get(key)
      if (entry != null) { entry.peers = found; entry.at = Date.now() }
      this.lookupsDone++
      this.lastLookup = { found: found.length, at: Date.now() }
      // An early lookup in a young swarm finds a fraction of it, and its answer must not stick for
      // a minute: while lookups bring news, repeat them soon; once they bring none, back off.
      this.lookupEveryMs = this.knownPeers.size > knownBefore ? LOOKUP_MIN_MS : Math.min(CLOSEST_CACHE_MS, this.lookupEveryMs * 2)
    } catch (err) {
      this.options.log?.(`closest-peer lookup for ${key} failed: ${describeError(err)}`)
    }
  }

  private async remember (peer: PeerId): Promise<void> {
    const name = peer.toString()
    const id = this.knownPeers.get(name)?.id ?? await kadId(peer)
    this.knownPeers.delete(name) // re-inserted last: the oldest is evicted first
    if (this.knownPeers.size >= KNOWN_PEERS_MAX) this.knownPeers.delete(this.knownPeers.keys().next().value as string)
    this.knownPeers.set(name, { peer, id, at: Date.now() })
  }
}

async function kadId (peer: PeerId): Promise<Uint8Array> {
  return (await sha256.digest(peer.toMultihash().bytes)).digest
}

interface ClosestEntry {
  peers: PeerId[]
  /** When the last lookup started or, once done, finished. */
  at: number
  inFlight: boolean
  pending?: Promise<void>
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
