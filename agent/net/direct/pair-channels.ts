import type { DirectFrameChannel } from '../frame-channel.js'
import { PairSocket, type LaneChannel } from './pair-socket.js'
import { silentLog, type Log } from '../../log.js'

/** A pair socket as tests and logs see it. */
export interface PairSocketSummary {
  readonly peer: string
  readonly dialedByUs: boolean
  readonly usable: boolean
  /** Lanes opened on it so far: by us (our rounds to the peer) and by the peer. */
  readonly lanesOpened: { readonly local: number, readonly remote: number }
}

export interface PairChannelsOptions {
  /** Our libp2p peer id: which of two sockets to one peer both sides prefer. */
  readonly localPeer: string
  /** The data port we listen on (0: none), told to peers we dial. */
  readonly localDataPort: () => number
  /** How long a socket we dialed stays open without a lane; one the peer dialed, twice that (so the dialer closes it first). */
  readonly idleMs: number
  /** A lane a peer opened to send us a round. */
  readonly onLane: (lane: LaneChannel) => void
  readonly log?: Log
}

/**
 * The pair channels (pair-socket.ts) this agent holds, whichever side dialed them: a round to a peer
 * opens a lane on the socket to it if there is one, whoever opened it.
 */
export class PairChannels {
  private readonly byPeer = new Map<string, Set<PairSocket>>()
  private readonly log: Log

  constructor (private readonly options: PairChannelsOptions) {
    this.log = options.log ?? silentLog
  }

  /** A socket that agreed on the pair protocol: ours to open lanes on, the peer's lanes to route. */
  adopt (outer: DirectFrameChannel, dialedByUs: boolean, remoteDataPort?: number): PairSocket {
    const pair = new PairSocket(outer, {
      dialedByUs,
      remoteDataPort,
      localDataPort: this.options.localDataPort(),
      idleMs: dialedByUs ? this.options.idleMs : 2 * this.options.idleMs,
      onLane: this.options.onLane,
      log: this.log
    })
    let set = this.byPeer.get(pair.remotePeer)
    if (set == null) this.byPeer.set(pair.remotePeer, set = new Set())
    set.add(pair)
    void pair.closed.then(() => {
      set.delete(pair)
      if (set.size === 0 && this.byPeer.get(pair.remotePeer) === set) this.byPeer.delete(pair.remotePeer)
    })
    return pair
  }

  /**
   * A lane on a socket to the peer listening at this data port (a restarted peer listens on a new
   * one), or null. Of two sockets (both sides dialed at once), both sides pick the one the peer with
   * the smaller id dialed, so the other falls idle and closes.
   */
  laneTo (peer: string, dataPort: number): LaneChannel | null {
    if (dataPort <= 0) return null
    const preferDialedByUs = this.options.localPeer < peer
    let chosen: PairSocket | null = null
    for (const pair of this.byPeer.get(peer) ?? []) {
      if (!pair.usable || pair.remoteDataPort !== dataPort) continue
      if (chosen == null || pair.dialedByUs === preferDialedByUs) chosen = pair
    }
    return chosen?.openLane() ?? null
  }

  /** The sockets held now: for tests and logs. */
  sockets (): PairSocketSummary[] {
    return [...this.byPeer.values()].flatMap(set => [...set]).map(pair => ({
      peer: pair.remotePeer, dialedByUs: pair.dialedByUs, usable: pair.usable, lanesOpened: { ...pair.lanesOpened }
    }))
  }

  /** Drops every pair socket (the agent is leaving the swarm). */
  closeAll (reason: Error): void {
    for (const set of this.byPeer.values()) for (const pair of set) pair.abort(reason)
    this.byPeer.clear()
  }
}
