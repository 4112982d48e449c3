import { Uint8ArrayList } from 'uint8arraylist'
import { ProtocolError, TimeoutError } from '../errors.js'
import { nextWait } from '../util/awake-timeout.js'

/** Bytes of the little-endian uint32 length header in front of every frame. */
export const FRAME_HEADER_BYTES = 4

/**
 * A bidirectional channel of length-prefixed frames to one authenticated peer. Implemented over
 * libp2p streams (FramedStream) and over direct TLS sockets (SocketFrameChannel), so protocol
 * code never knows which path carries it.
 */
/**
 * How tensor parts travel (AVS_DATA_CHANNEL, the `path` label of averaging_data_channels_total):
 * over a direct TLS socket, or over a libp2p stream.
 */
export type DataChannelKind = 'direct' | 'libp2p'

/** A write's pieces are no longer referenced by the channel (err: they may be, and never will be written). */
export type Flushed = (err?: Error | null) => void

export interface FrameChannel {
  /** Which kind of data channel carries it. */
  readonly kind: DataChannelKind
  /** The authenticated remote peer id. */
  readonly remotePeer: string
  /** Next frame, or null once the remote closed its side cleanly. Rejects on timeout, reset or a protocol violation. */
  read: (timeoutMs?: number) => Promise<Uint8Array | null>
  /**
   * Like read(), but the frame as the transport's chunks, not joined into one array: a reader that
   * copies the bytes somewhere anyway (tensor parts into the kernels' buffer) saves a copy.
   */
  readPieces: (timeoutMs?: number) => Promise<Uint8ArrayList | null>
  /**
   * The reader is done with a frame from readPieces (it copied what it needed): a channel that
   * recycles frame memory may reuse it at once. Optional for readers and for channels.
   */
  release?: (frame: Uint8ArrayList) => void
  /**
   * Sends one frame (a payload, or its pieces in order: they are written as they are, not joined);
   * waits while the send buffer is above its high-water mark. A socket may still read the pieces after
   * the returned promise settles, until it has written them: they must not change before that.
   * `flushed`, when given, is called once the channel holds no reference to the pieces any more, so
   * their memory may be reused (wire-memory.ts): at once by a channel that copies them, when the socket
   * has written them by one that does not, with an error if it never will. A channel that cannot tell
   * (libp2p's muxer keeps the pieces until it writes them) never calls it: such memory is collected.
   */
  write: (payload: Uint8Array | readonly Uint8Array[], flushed?: Flushed) => Promise<void>
  /** Half-close: no more frames from us. */
  closeWrite: () => Promise<void>
  /** Tears the channel down, failing pending reads with this reason. */
  abort: (reason: Error) => void
}

/** A direct data channel: a TLS socket, on this thread or on a data thread. */
export interface DirectFrameChannel extends FrameChannel {
  readonly kind: 'direct'
  /** The protocol both sides agreed on (TLS ALPN): which of a protocol's versions this channel speaks. */
  readonly protocol: string
  /** Resolves once the connection is fully closed. */
  readonly closed: Promise<void>
}

export interface FrameQueueOptions {
  /** Largest frame accepted from the wire; a larger announced length fails before any allocation. */
  readonly maxFrameBytes: number
  /** Decoded frames held before the source is paused. */
  readonly maxQueuedFrames: number
  /** Memory for a frame read in place (target/filled), e.g. from a pool its readers give back to; default: a fresh array. */
  readonly frameMemory?: (bytes: number) => Uint8Array
}

/** What the queue needs from the transport under it. */
export interface FrameSource {
  pause: () => void
  resume: () => void
  /** Called once, with the reason, when the bytes from the wire break the framing. */
  violate: (err: Error) => void
  describePeer: () => string
}

type Waiter = { resolve: (frame: Uint8ArrayList | null) => void, reject: (err: Error) => void }

/**
 * Splits incoming bytes into frames, bounds them before allocation and hands them to one reader,
 * pausing the source while the reader lags: the transport's flow control then reaches the sender.
 */
export class FrameQueue {
  private readonly buffer = new Uint8ArrayList()
  private readonly frames: Uint8ArrayList[] = []
  private waiter: Waiter | null = null
  /**
   * One timer for every read's timeout, re-armed by refresh() rather than created per read: a read
   * per part, thousands a round, and a timer, a promise and two closures each were garbage V8 kept
   * for its full collections (a heap sampling profile, 4 peers × 25M floats). readTimed is the
   * number of the read it times (reads counts them), so it never times out a later read.
   */
  private readTimer: NodeJS.Timeout | undefined
  private readTimerMs = NaN
  private reads = 0
  private readTimed = -1
  /** The timed read's timeout, when it began, and when its timer was last armed and for how long (awake-timeout.ts). */
  private readMs = 0
  private readStartedAt = 0
  private armedAt = 0
  private armedMs = 0
  private ended = false
  private failure: Error | null = null
  private paused = false
  /** Reading in place (target/filled): the header's bytes, or the frame's memory, and how much of it is in. */
  private inPlace: { header: Uint8Array, got: number, frame: Uint8Array | null } | null = null

  constructor (private readonly source: FrameSource, private readonly options: FrameQueueOptions) {}

  get error (): Error | null { return this.failure }

  async read (timeoutMs?: number): Promise<Uint8Array | null> {
    const frame = await this.readPieces(timeoutMs)
    if (frame == null) return null
    // One chunk: a view of it, no copy; several: joined.
    // A plain Uint8Array either way, not the transport's Buffer subclass.
    const bytes = frame.subarray()
    return Buffer.isBuffer(bytes) ? new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength) : bytes
  }

  async readPieces (timeoutMs?: number): Promise<Uint8ArrayList | null> {
    const frame = this.frames.shift()
    if (frame !== undefined) {
      this.maybeResume()
      return frame
    }
    if (this.failure != null) throw this.failure
    if (this.ended) return null
    return await new Promise<Uint8ArrayList | null>((resolve, reject) => {
      this.waiter = { resolve, reject }
      this.reads++
      if (timeoutMs !== undefined && Number.isFinite(timeoutMs)) this.timeRead(Math.max(1, timeoutMs))
    })
  }

  private timeRead (ms: number): void {
    this.readTimed = this.reads
    this.readStartedAt = this.armedAt = performance.now()
    this.readMs = this.armedMs = ms
    if (this.readTimer !== undefined && this.readTimerMs === ms) {
      this.readTimer.refresh().ref()
      return
    }
    clearTimeout(this.readTimer)
    this.readTimerMs = ms
    this.readTimer = setTimeout(() => { this.readTimerFired() }, ms)
  }

  /**
   * A read's time is up, counted in time our own event loop was awake: a timer that fired late (our
   * process stalled) waits again as long as it was late, since the frame it waits for may be in the
   * socket already, read only after the timers (awake-timeout.ts; under CPU burners such reads gave
   * up on live peers).
   */
  private readTimerFired (): void {
    if (this.waiter == null || this.readTimed !== this.reads) return
    const ms = this.readMs
    const now = performance.now()
    const again = nextWait(ms, this.readStartedAt, this.armedAt, this.armedMs, now)
    if (again > 0) {
      // Its own timer: the next read arms one of its length again (readTimerMs).
      this.readTimerMs = NaN
      this.armedAt = now
      this.armedMs = again
      this.readTimer = setTimeout(() => { this.readTimerFired() }, again)
      return
    }
    const waiter = this.waiter
    this.settled()
    waiter.reject(new TimeoutError(`no message from ${this.source.describePeer()} within ${Math.round(ms)} ms`))
  }

  /** The waiting read is answered: its timer may stay armed, but no longer holds the process up. */
  private settled (): void {
    this.waiter = null
    this.readTimer?.unref()
  }

  push (data: Uint8Array | Uint8ArrayList): void {
    if (this.failure != null) return
    this.buffer.append(data)
    while (this.buffer.byteLength >= FRAME_HEADER_BYTES) {
      // Byte by byte: Uint8ArrayList.getUint32 allocates a view per call, one per received chunk.
      const b = this.buffer
      const length = (b.get(0) | (b.get(1) << 8) | (b.get(2) << 16)) + b.get(3) * 2 ** 24
      if (this.beyondBound(length)) return
      if (this.buffer.byteLength < FRAME_HEADER_BYTES + length) break
      const end = FRAME_HEADER_BYTES + length
      // A view of the transport's chunks: libp2p streams and node's TLS sockets hand every chunk in
      // memory of its own and never write to it again (test/agent/net/transport-chunks.integration.test.ts).
      const frame = this.buffer.sublist(FRAME_HEADER_BYTES, end)
      this.buffer.consume(end)
      this.deliver(frame)
    }
    this.maybePause()
  }

  /** A frame announced above maxFrameBytes breaks the framing: said once, before anything is allocated for it. */
  private beyondBound (length: number): boolean {
    if (length <= this.options.maxFrameBytes) return false
    this.source.violate(new ProtocolError(`peer ${this.source.describePeer()} announced a ${length}-byte message, above the ${this.options.maxFrameBytes}-byte bound`))
    return true
  }

  private maybePause (): void {
    if (this.frames.length >= this.options.maxQueuedFrames && !this.paused) {
      this.paused = true
      this.source.pause()
    }
  }

  /**
   * Where the transport should put its next bytes, for a transport that reads into memory we name
   * (readInPlace): the rest of the frame being read, or of its header. Never empty. filled(n) then
   * says how many bytes it wrote there.
   */
  target (): Uint8Array {
    if (this.inPlace === null) this.inPlace = { header: new Uint8Array(FRAME_HEADER_BYTES), got: 0, frame: null }
    const p = this.inPlace
    return p.frame === null ? p.header.subarray(p.got) : p.frame.subarray(p.got)
  }

  /** n bytes were written at the start of the last target(). */
  filled (n: number): void {
    const p = this.inPlace
    if (this.failure != null || p === null) return
    p.got += n
    if (p.frame === null) {
      if (p.got < FRAME_HEADER_BYTES) return
      const h = p.header
      const length = (h[0] | (h[1] << 8) | (h[2] << 16)) + h[3] * 2 ** 24
      p.got = 0
      if (this.beyondBound(length)) return
      if (length === 0) this.deliver(new Uint8ArrayList())
      else p.frame = this.options.frameMemory?.(length) ?? new Uint8Array(length)
    } else if (p.got === p.frame.byteLength) {
      const frame = new Uint8ArrayList(p.frame)
      p.frame = null
      p.got = 0
      this.deliver(frame)
    } else return
    this.maybePause()
  }

  /** The remote closed its side: a clean end only between frames. */
  end (): void {
    if (this.ended || this.failure != null) return
    if (this.buffer.byteLength > 0 || (this.inPlace !== null && (this.inPlace.got > 0 || this.inPlace.frame !== null))) {
      this.fail(new ProtocolError(`peer ${this.source.describePeer()} closed the stream in the middle of a message`))
      return
    }
    this.ended = true
    const waiter = this.waiter
    if (this.frames.length === 0 && waiter != null) {
      this.settled()
      waiter.resolve(null)
    }
    // Reads from here on answer at once: the timer would only keep this queue alive until it fired.
    clearTimeout(this.readTimer)
  }

  fail (err: Error): void {
    if (this.failure != null) return
    this.failure = err
    this.frames.length = 0
    const waiter = this.waiter
    this.settled()
    clearTimeout(this.readTimer)
    waiter?.reject(err)
  }

  private deliver (frame: Uint8ArrayList): void {
    const waiter = this.waiter
    if (waiter != null) {
      this.settled()
      waiter.resolve(frame)
    } else this.frames.push(frame)
  }

  private maybeResume (): void {
    if (this.paused && this.frames.length < this.options.maxQueuedFrames / 2) {
      this.paused = false
      this.source.resume()
    }
  }
}

/** A frame's payload pieces, whichever form write() was given. */
export function payloadPieces (payload: Uint8Array | readonly Uint8Array[]): readonly Uint8Array[] {
  return payload instanceof Uint8Array ? [payload] : payload
}

/** Bytes in a frame's payload pieces. */
export function payloadBytes (pieces: readonly Uint8Array[]): number {
  let n = 0
  for (const p of pieces) n += p.byteLength
  return n
}

/** The 4-byte little-endian length header of a frame. */
export function frameHeader (payloadBytes: number): Uint8Array {
  // From node's shared pool: one small typed array and a DataView per frame cost more than the
  // rest of the framing (a CPU profile showed 0.2 s per GiB of 64 KiB parts).
  const header = Buffer.allocUnsafe(FRAME_HEADER_BYTES)
  header.writeUInt32LE(payloadBytes, 0)
  return header
}
