import type { Uint8ArrayList } from 'uint8arraylist'
import { ProtocolError, describeError } from '../../errors.js'
import { FrameQueue, frameBytes, payloadBytes, payloadPieces, type DirectFrameChannel } from '../frame-channel.js'
import { silentLog, type Log } from '../../log.js'

/**
 * One direct data channel between two agents that carries both roles of the pair: the rounds in
 * which we send to the peer and those in which it sends to us, each on a lane of its own. Two
 * sockets per pair (one per role) doubled the TCP flows on every link, and at 8 peers × 100 Mbit/s
 * flows stalled for seconds in retransmission backoff behind 14 others (BENCHMARKS.md).
 *
 * Every lane has its own flow control: its sender may run LANE_WINDOW_BYTES ahead of what the
 * reader took, and the reader grants more as it takes frames, so the socket itself is always read
 * and a lane whose reader waits (a reducer that stops reading parts while its means back up) never
 * holds up the other (which one paused socket would: both peers could wait on each other).
 *
 * Each socket frame is [kind: u8][lane: u32 LE][payload]. Lanes opened by the dialing side have odd
 * ids, the accepting side's even ids, each side's increasing, so the two never collide.
 */

/** Bytes of a lane frame's own header inside the socket's frame. */
export const LANE_HEADER_BYTES = 5

/**
 * Bytes a lane's sender may send beyond what the lane's reader has taken. It bounds a lane's
 * throughput to this much per round trip: 8 MiB is 670 Mbit/s at 100 ms, above what Linux's default
 * TCP buffers (6 MiB) let one connection reach there, so the lane is not the narrower window. It is
 * memory only while a reader lags (a reducer waiting for its slowest sender).
 */
export const LANE_WINDOW_BYTES = 8 * 1024 * 1024

/** The reader grants taken bytes back once this many have piled up (fewer, larger credit frames). */
const GRANT_BYTES = LANE_WINDOW_BYTES / 4

/** The largest frame a lane carries: one that fits whatever part of the window is not yet granted back. */
export const MAX_LANE_FRAME_BYTES = LANE_WINDOW_BYTES - GRANT_BYTES

/** Lanes the peer may hold open on one socket (the router admits 8 aggregate channels a peer). */
const MAX_PEER_LANES = 16

/** Bytes of a reset's reason read from the wire; the rest is dropped. */
const MAX_REASON_BYTES = 200

const enum Kind {
  /** A frame of the lane's data. */
  DATA = 0,
  /** A new lane, opened by the sender of this frame. */
  OPEN = 1,
  /** No more data from the sender of this frame on the lane (half-close). */
  CLOSE = 2,
  /** The lane is over, with a reason (UTF-8). */
  RESET = 3,
  /** The receiver took frames: the sender may send this many bytes (u32 LE) more. */
  CREDIT = 4,
  /** From the dialing side, first: the data port it listens on (u32 LE; 0: none). */
  HELLO = 5
}

export interface PairSocketOptions {
  /** Whether we dialed the socket (our lanes then have odd ids). */
  readonly dialedByUs: boolean
  /** The data port the peer listens on: known when we dialed it, told by its HELLO when it dialed us. */
  readonly remoteDataPort?: number
  /** The data port we listen on (0: none), told to the peer when we dialed. */
  readonly localDataPort: number
  /** The socket closes after this long without a lane. */
  readonly idleMs: number
  /** A lane the peer opened (it sends to us): to the aggregate router. */
  readonly onLane: (lane: LaneChannel) => void
  readonly log?: Log
}

/** A pair channel's socket and its lanes. */
export class PairSocket {
  readonly remotePeer: string
  readonly dialedByUs: boolean
  /** The data port the peer listens on; undefined until its HELLO came. */
  remoteDataPort: number | undefined
  /** Resolves once the socket is fully closed. */
  readonly closed: Promise<void>
  /** Lanes opened since the socket opened, by us and by the peer. */
  readonly lanesOpened = { local: 0, remote: 0 }
  private readonly lanes = new Map<number, LaneChannel>()
  private nextLocalId: number
  private lastRemoteId = 0
  private remoteLanes = 0
  /** No new lanes: the socket is closing (idle, ended by the peer, or failed). */
  private ending = false
  private idleTimer: NodeJS.Timeout | undefined
  private readonly log: Log

  constructor (private readonly outer: DirectFrameChannel, private readonly options: PairSocketOptions) {
    this.remotePeer = outer.remotePeer
    this.dialedByUs = options.dialedByUs
    this.remoteDataPort = options.remoteDataPort
    this.nextLocalId = options.dialedByUs ? 1 : 2
    this.log = options.log ?? silentLog
    this.closed = outer.closed
    void outer.closed.then(() => { this.fail(new ProtocolError(`the data channel to ${this.remotePeer} closed`)) })
    if (options.dialedByUs) this.send(Kind.HELLO, 0, u32(options.localDataPort))
    this.armIdle()
    void this.pump()
  }

  /** Whether a round may open a lane on it now. */
  get usable (): boolean {
    return !this.ending && this.remoteDataPort !== undefined
  }

  /** A lane for a round in which we send to the peer. */
  openLane (): LaneChannel {
    if (this.ending) throw new ProtocolError(`the data channel to ${this.remotePeer} is closing`)
    const id = this.nextLocalId
    this.nextLocalId += 2
    const lane = this.addLane(id)
    this.lanesOpened.local++
    this.send(Kind.OPEN, id)
    return lane
  }

  /** Tears the socket and every lane on it down. */
  abort (reason: Error): void {
    this.fail(reason)
    this.outer.abort(reason)
  }

  /** Sends a frame of the lane; resolves once it is with the socket (waits while its send buffer is full). */
  async sendData (lane: number, payload: Uint8Array | readonly Uint8Array[]): Promise<void> {
    await this.outer.write([header(Kind.DATA, lane), ...payloadPieces(payload)])
  }

  /** A control frame: written in call order, its failure shows on the lanes through the socket's. */
  send (kind: Kind, lane: number, payload?: Uint8Array): void {
    const head = header(kind, lane)
    this.outer.write(payload == null ? head : [head, payload]).catch(() => {})
  }

  /** A lane ended here (both halves closed, reset, or failed). */
  laneEnded (lane: LaneChannel): void {
    if (this.lanes.get(lane.id) !== lane) return
    this.lanes.delete(lane.id)
    if (!this.isLocal(lane.id)) this.remoteLanes--
    this.armIdle()
  }

  private addLane (id: number): LaneChannel {
    const lane = new LaneChannel(this, id, this.outer.protocol)
    this.lanes.set(id, lane)
    clearTimeout(this.idleTimer)
    return lane
  }

  private isLocal (id: number): boolean {
    return (id % 2 === 1) === this.dialedByUs
  }

  /** Whether an id names a lane that was opened at some point (it may have ended since). */
  private everOpened (id: number): boolean {
    return this.isLocal(id) ? id > 0 && id < this.nextLocalId : id > 0 && id <= this.lastRemoteId
  }

  private armIdle (): void {
    clearTimeout(this.idleTimer)
    if (this.ending || this.lanes.size > 0) return
    this.idleTimer = setTimeout(() => {
      this.ending = true
      this.log.debug(`closing the data channel to ${this.remotePeer}: no round for ${this.options.idleMs} ms`)
      void this.outer.closeWrite().catch(() => {})
    }, this.options.idleMs)
    this.idleTimer.unref()
  }

  /** Reads the socket without pause: every lane's own window bounds what waits in memory. */
  private async pump (): Promise<void> {
    try {
      for (;;) {
        const frame = await this.outer.readPieces()
        if (frame == null) {
          // The peer closed its side: its lanes end as they are, and so does ours.
          this.ending = true
          for (const lane of [...this.lanes.values()]) lane.remoteEnded()
          await this.outer.closeWrite()
          return
        }
        this.dispatch(frame)
      }
    } catch (err) {
      this.fail(err instanceof Error ? err : new ProtocolError(describeError(err)))
    }
  }

  private dispatch (frame: Uint8ArrayList): void {
    if (frame.byteLength < LANE_HEADER_BYTES) { this.violate('sent a frame shorter than a lane header'); return }
    const kind = frame.get(0)
    const id = frame.get(1) + (frame.get(2) << 8) + (frame.get(3) << 16) + frame.get(4) * 2 ** 24
    const bodyBytes = frame.byteLength - LANE_HEADER_BYTES
    switch (kind) {
      case Kind.DATA: {
        const lane = this.lanes.get(id)
        if (lane != null) lane.deliver(frame.sublist(LANE_HEADER_BYTES))
        // Data for a lane that ended here may still be on its way; for one never opened it is not.
        else if (!this.everOpened(id)) this.violate(`sent data on lane ${id}, which was never opened`)
        return
      }
      case Kind.OPEN: {
        if (this.isLocal(id) || id <= this.lastRemoteId || bodyBytes !== 0) { this.violate(`opened lane ${id} out of order`); return }
        this.lastRemoteId = id
        if (this.ending || this.remoteLanes >= MAX_PEER_LANES) {
          this.send(Kind.RESET, id, new TextEncoder().encode(this.ending ? 'the data channel is closing' : `more than ${MAX_PEER_LANES} lanes open`))
          return
        }
        const lane = this.addLane(id)
        this.remoteLanes++
        this.lanesOpened.remote++
        this.options.onLane(lane)
        return
      }
      case Kind.CLOSE:
      case Kind.RESET:
      case Kind.CREDIT: {
        if (!this.everOpened(id)) { this.violate(`sent kind ${kind} on lane ${id}, which was never opened`); return }
        const lane = this.lanes.get(id)
        if (lane == null) return
        if (kind === Kind.CLOSE) lane.remoteEnded()
        else if (kind === Kind.RESET) lane.remoteReset(new TextDecoder().decode(frame.subarray(LANE_HEADER_BYTES, LANE_HEADER_BYTES + Math.min(bodyBytes, MAX_REASON_BYTES))))
        else if (bodyBytes !== 4) this.violate('sent a malformed credit')
        else {
          const n = frame.get(5) + (frame.get(6) << 8) + (frame.get(7) << 16) + frame.get(8) * 2 ** 24
          if (!lane.credited(n)) this.violate(`granted ${n} bytes on lane ${id}, beyond the lane's window`)
        }
        return
      }
      case Kind.HELLO: {
        if (this.dialedByUs || this.remoteDataPort !== undefined || id !== 0 || bodyBytes !== 4) { this.violate('sent an unexpected hello'); return }
        const port = frame.get(5) + (frame.get(6) << 8) + (frame.get(7) << 16) + frame.get(8) * 2 ** 24
        if (port > 65535) { this.violate(`announced data port ${port}`); return }
        this.remoteDataPort = port
        return
      }
      default:
        this.violate(`sent a lane frame of unknown kind ${kind}`)
    }
  }

  /** A peer that breaks the lane protocol loses the socket, and every lane on it. */
  violate (what: string): void {
    const err = new ProtocolError(`peer ${this.remotePeer} ${what}`)
    this.log.debug(`dropping the data channel to ${this.remotePeer}: ${err.message}`)
    this.abort(err)
  }

  private fail (reason: Error): void {
    this.ending = true
    clearTimeout(this.idleTimer)
    for (const lane of [...this.lanes.values()]) lane.failed(reason)
    this.lanes.clear()
    this.remoteLanes = 0
  }
}

/**
 * One round's exchange on a pair socket, as a channel of its own: the aggregate protocol runs on it
 * as on a socket of its own (agent/allreduce/), one round per lane.
 */
export class LaneChannel implements DirectFrameChannel {
  readonly kind = 'direct' as const
  readonly remotePeer: string
  readonly closed: Promise<void>
  private readonly queue: FrameQueue
  private resolveClosed!: () => void
  /** Bytes we may still send; waiters for more. */
  private sendCredit = LANE_WINDOW_BYTES
  private creditWaiters: Array<() => void> = []
  /** Bytes the peer may send beyond those it sent (what we granted and it has not used). */
  private receiveCredit = LANE_WINDOW_BYTES
  /** Bytes our reader took since we last granted them back. */
  private taken = 0
  private localClosed = false
  private remoteClosed = false
  private over: Error | null = null

  constructor (private readonly pair: PairSocket, readonly id: number, readonly protocol: string) {
    this.remotePeer = pair.remotePeer
    this.closed = new Promise(resolve => { this.resolveClosed = resolve })
    this.queue = new FrameQueue({
      // The window bounds the queue: the socket is never paused for one lane.
      pause: () => {},
      resume: () => {},
      violate: (err) => { pair.violate(err.message) },
      describePeer: () => pair.remotePeer
    }, { maxFrameBytes: Number.MAX_SAFE_INTEGER, maxQueuedFrames: Number.MAX_SAFE_INTEGER })
  }

  async read (timeoutMs?: number): Promise<Uint8Array | null> {
    const frame = await this.readPieces(timeoutMs)
    return frame == null ? null : frameBytes(frame)
  }

  async readPieces (timeoutMs?: number): Promise<Uint8ArrayList | null> {
    const frame = await this.queue.readPieces(timeoutMs)
    if (frame != null) this.took(frame.byteLength)
    return frame
  }

  async write (payload: Uint8Array | readonly Uint8Array[]): Promise<void> {
    const pieces = payloadPieces(payload)
    const bytes = payloadBytes(pieces)
    if (bytes > MAX_LANE_FRAME_BYTES) throw new ProtocolError(`a ${bytes}-byte frame is above a lane's ${MAX_LANE_FRAME_BYTES}-byte bound`)
    while (this.sendCredit < bytes && this.over == null) await new Promise<void>(resolve => { this.creditWaiters.push(resolve) })
    if (this.over != null) throw this.over
    if (this.localClosed) throw new ProtocolError(`lane to ${this.remotePeer} is closed for writing`)
    this.sendCredit -= bytes
    await this.pair.sendData(this.id, pieces)
  }

  async closeWrite (): Promise<void> {
    if (this.localClosed || this.over != null) return
    this.localClosed = true
    this.pair.send(Kind.CLOSE, this.id)
    if (this.remoteClosed) this.finish()
  }

  abort (reason: Error): void {
    if (this.over != null) return
    this.pair.send(Kind.RESET, this.id, new TextEncoder().encode(reason.message.slice(0, MAX_REASON_BYTES)))
    this.failed(reason)
  }

  /** A data frame from the peer, within the window we granted. */
  deliver (frame: Uint8ArrayList): void {
    if (this.remoteClosed) { this.pair.violate(`sent data on lane ${this.id} after closing it`); return }
    if (frame.byteLength > this.receiveCredit) { this.pair.violate(`sent more than its window on lane ${this.id}`); return }
    this.receiveCredit -= frame.byteLength
    this.queue.pushFrame(frame)
  }

  /** The peer sent its last frame on the lane (or closed the socket). */
  remoteEnded (): void {
    if (this.remoteClosed) return
    this.remoteClosed = true
    this.queue.end()
    if (this.localClosed) this.finish()
  }

  remoteReset (reason: string): void {
    this.failed(new ProtocolError(`peer ${this.remotePeer} reset the lane: ${reason}`))
  }

  /** The peer took n more of our bytes; false if that grants more than the window. */
  credited (n: number): boolean {
    if (n < 1 || this.sendCredit + n > LANE_WINDOW_BYTES) return false
    this.sendCredit += n
    for (const wake of this.creditWaiters.splice(0)) wake()
    return true
  }

  failed (reason: Error): void {
    if (this.over != null) return
    this.over = reason
    this.queue.fail(reason)
    for (const wake of this.creditWaiters.splice(0)) wake()
    this.finish()
  }

  /** Our reader took a frame of this many bytes: grant them back once GRANT_BYTES are taken. */
  private took (bytes: number): void {
    this.taken += bytes
    if (this.taken < GRANT_BYTES || this.remoteClosed || this.over != null) return
    this.receiveCredit += this.taken
    this.pair.send(Kind.CREDIT, this.id, u32(this.taken))
    this.taken = 0
  }

  private finish (): void {
    this.pair.laneEnded(this)
    this.resolveClosed()
  }
}

function header (kind: Kind, lane: number): Uint8Array {
  const bytes = Buffer.allocUnsafe(LANE_HEADER_BYTES)
  bytes[0] = kind
  bytes.writeUInt32LE(lane, 1)
  return bytes
}

function u32 (n: number): Uint8Array {
  const bytes = Buffer.allocUnsafe(4)
  bytes.writeUInt32LE(n, 0)
  return bytes
}
