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
}

export interface DictionaryStoreLimits {
  readonly maxKeys: number
  readonly maxEntriesPerKey: number
  /** Furthest into the future an expiration may lie, in seconds (clock skew plus the longest expiration). */
  readonly maxExpirationAhead: number
}

export const DEFAULT_STORE_LIMITS: DictionaryStoreLimits = { maxKeys: 10_000, maxEntriesPerKey: 4096, maxExpirationAhead: 3600 }

export type StoreOutcome = 'stored' | 'stale' | 'expired' | 'too-far' | 'full'

export class DictionaryStore {
  private readonly keys = new Map<string, Map<string, StoredEntry>>()

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
    if (existing != null && existing.expiration >= entry.expiration) return 'stale'
    if (existing == null && entries.size >= this.limits.maxEntriesPerKey) {
      this.pruneKey(key, entries, now)
      if (entries.size >= this.limits.maxEntriesPerKey) return 'full'
    }
    entries.set(entry.peerId, entry)
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
    let n = 0
    for (const entries of this.keys.values()) n += entries.size
    return n
  }

  private pruneKey (key: string, entries: Map<string, StoredEntry>, now: number): void {
    for (const [peer, entry] of entries) if (!(entry.expiration > now)) entries.delete(peer)
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
