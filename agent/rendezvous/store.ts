/**
 * hivemind's DictionaryDHTValue on one replica: key -> peer -> entry, where a write wins only with
 * a later expiration than the one stored (so a withdrawal with a later expiration overrides an
 * earlier "looking"), and expired entries are invisible. Sizes are bounded: a hostile writer can
 * fill its share but never grow memory without limit.
 */
export interface StoredEntry {
  readonly peerId: string
  readonly expiration: number
  readonly looking: boolean
  readonly priority: number
  readonly addrs: readonly Uint8Array[]
  /** The peer's direct data channel port, where it serves the key's protocol too (state sharing); absent: libp2p only. */
  readonly dataPort?: number
  /** Where that port is reached at another port, by host (PeerInfo.data_addrs); absent: nowhere. */
  readonly dataAddrs?: readonly Uint8Array[]
}

export interface DictionaryStoreLimits {
  readonly maxKeys: number
  readonly maxEntriesPerKey: number
  /** Furthest into the future an expiration may lie, in seconds (clock skew plus the longest expiration). */
  readonly maxExpirationAhead: number
  /** Entries over all keys: with maxKeys alone, keys x entries per key would allow 40 million. */
  readonly maxEntries: number
  /**
   * Keys one peer may hold entries under at once. An honest agent writes a handful (its group
   * key, the donor key, a withdrawn key until it expires); a hostile one cannot fill the store alone.
   */
  readonly maxKeysPerPeer: number
}

export const DEFAULT_STORE_LIMITS: DictionaryStoreLimits = { maxKeys: 10_000, maxEntriesPerKey: 4096, maxExpirationAhead: 3600, maxEntries: 100_000, maxKeysPerPeer: 64 }

export type StoreOutcome = 'stored' | 'stale' | 'expired' | 'too-far' | 'full' | 'peer-full'

export class DictionaryStore {
  private readonly keys = new Map<string, Map<string, StoredEntry>>()
  /** Per writer: the keys it holds an entry under, with that entry's expiration. */
  private readonly byPeer = new Map<string, Map<string, number>>()
  private entryCount = 0

  constructor (private readonly limits: DictionaryStoreLimits = DEFAULT_STORE_LIMITS) {}

  put (key: string, entry: StoredEntry, now: number): StoreOutcome {
    if (!(entry.expiration > now)) return 'expired'
    if (entry.expiration > now + this.limits.maxExpirationAhead) return 'too-far'
    let entries = this.keys.get(key)
    if (entries == null) {
      if (this.keys.size >= this.limits.maxKeys) this.prune(now)
      if (this.keys.size >= this.limits.maxKeys) return 'full'
      entries = new Map()
      this.keys.set(key, entries)
    }
    const existing = entries.get(entry.peerId)
    if (existing != null && existing.expiration >= entry.expiration) return this.dropIfEmpty(key, entries, 'stale')
    if (existing == null) {
      if (entries.size >= this.limits.maxEntriesPerKey) {
        this.pruneKey(key, entries, now)
        if (entries.size >= this.limits.maxEntriesPerKey) return this.dropIfEmpty(key, entries, 'full')
      }
      if (this.entryCount >= this.limits.maxEntries) {
        this.prune(now)
        if (this.entryCount >= this.limits.maxEntries) return this.dropIfEmpty(key, entries, 'full')
      }
      if (!this.roomForPeer(entry.peerId, now)) return this.dropIfEmpty(key, entries, 'peer-full')
      this.entryCount++
    }
    entries.set(entry.peerId, entry)
    if (!this.keys.has(key)) this.keys.set(key, entries)
    let held = this.byPeer.get(entry.peerId)
    if (held == null) { held = new Map(); this.byPeer.set(entry.peerId, held) }
    held.set(key, entry.expiration)
    return 'stored'
  }

  /** Live entries under the key, withdrawals included (callers filter on `looking`). */
  get (key: string, now: number): StoredEntry[] {
    const entries = this.keys.get(key)
    if (entries == null) return []
    const live: StoredEntry[] = []
    for (const entry of entries.values()) if (entry.expiration > now) live.push(entry)
    return live
  }

  prune (now: number): void {
    for (const [key, entries] of this.keys) this.pruneKey(key, entries, now)
  }

  get size (): number {
    return this.entryCount
  }

  get keyCount (): number {
    return this.keys.size
  }

  /** Whether the writer is under its key bound, after dropping its expired entries. */
  private roomForPeer (peer: string, now: number): boolean {
    const held = this.byPeer.get(peer)
    if (held == null || held.size < this.limits.maxKeysPerPeer) return true
    for (const [key, expiration] of held) {
      if (expiration > now) continue
      const entries = this.keys.get(key)
      if (entries != null) this.pruneKey(key, entries, now)
      else held.delete(key)
    }
    return held.size < this.limits.maxKeysPerPeer
  }

  /** A key created for a write that was then refused must not linger empty. */
  private dropIfEmpty (key: string, entries: Map<string, StoredEntry>, outcome: StoreOutcome): StoreOutcome {
    if (entries.size === 0) this.keys.delete(key)
    return outcome
  }

  private pruneKey (key: string, entries: Map<string, StoredEntry>, now: number): void {
    for (const [peer, entry] of entries) {
      if (entry.expiration > now) continue
      entries.delete(peer)
      this.entryCount--
      const held = this.byPeer.get(peer)
      held?.delete(key)
      if (held?.size === 0) this.byPeer.delete(peer)
    }
    if (entries.size === 0) this.keys.delete(key)
  }
}

/** Merges views from several replicas: per peer, the entry with the latest expiration. */
export function mergeEntries (lists: ReadonlyArray<readonly StoredEntry[]>): StoredEntry[] {
  const best = new Map<string, StoredEntry>()
  for (const list of lists) {
    for (const entry of list) {
      const seen = best.get(entry.peerId)
      if (seen == null || entry.expiration > seen.expiration) best.set(entry.peerId, entry)
    }
  }
  return [...best.values()]
}
