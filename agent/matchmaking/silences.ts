/** Peers remembered (the least recently noted forgotten first): a swarm's worth. */
const REMEMBERED = 1024

/**
 * When each peer last failed to answer us within a request timeout (a join request, a liveness
 * check), and when we last heard from it: what one search or all-reduce learnt that the next search
 * may use (decisions.ts declaredBeforeSilence). A search's own record (Search.silent) ends with it,
 * and survivors of a frozen agent's group each paid a request timeout asking it to lead them in
 * their next search, its declaration from before the freeze still listed (a freeze run: 19 of 57
 * such asks came from peers that had found it silent seconds before, 25 more from peers whose
 * rendezvous requests to it had timed out: Rendezvous.silentSince).
 */
export class Silences {
  /** Unix seconds of the last silence and of the last sign of life, by peer id. */
  private readonly silent = new Map<string, number>()
  private readonly alive = new Map<string, number>()

  noteSilent (peerId: string, atSeconds: number): void {
    remember(this.silent, peerId, atSeconds)
  }

  /** It answered, or asked us something: whatever it failed before then is over. */
  noteAlive (peerId: string, atSeconds: number): void {
    remember(this.alive, peerId, atSeconds)
  }

  /**
   * When the peer last failed us, here or (`elsewhere`, unix seconds) in another service's
   * requests, if we have not heard from it since.
   */
  silentAt (peerId: string, elsewhere?: number): number | undefined {
    const at = Math.max(this.silent.get(peerId) ?? -Infinity, elsewhere ?? -Infinity)
    return Number.isFinite(at) && at > (this.alive.get(peerId) ?? -Infinity) ? at : undefined
  }
}

function remember (map: Map<string, number>, peerId: string, at: number): void {
  map.delete(peerId)
  map.set(peerId, at)
  if (map.size > REMEMBERED) map.delete(map.keys().next().value as string)
}
