import type { Uint8ArrayList } from 'uint8arraylist'
import { ProtocolError } from '../../../errors.js'
import { FrameQueue, payloadBytes, payloadPieces, type DirectFrameChannel, type Flushed } from '../../frame-channel.js'
import type { ToDataThread } from './thread-messages.js'

/** What a channel needs from the data thread that holds its socket. */
export interface ThreadLink {
  post: (message: ToDataThread, transfer?: ArrayBuffer[]) => void
  /** A buffer of at least `bytes` bytes, reused where one came back. */
  buffer: (bytes: number) => ArrayBuffer
  recycle: (buf: ArrayBuffer) => void
}

/** Frames bigger than this are not sent back for reuse: rare, and they would pin memory. */
const MAX_RELEASED_FRAME_BYTES = 4 * 1024 * 1024

export interface ThreadChannelOptions {
  readonly maxFrameBytes: number
  /** Frames the data thread may hand us before we read them. */
  readonly maxQueuedFrames: number
  /** Bytes written but not yet flushed to the socket before write() waits. */
  readonly writeHighWaterMark?: number
}

/**
 * The main thread's end of a direct channel whose TLS socket lives on a data thread. Writes are
 * copied into a transferred buffer (so the caller may reuse its pieces at once); frames arrive
 * as transferred buffers; both directions are bounded, so back-pressure reaches the socket.
 */
export class ThreadFrameChannel implements DirectFrameChannel {
  readonly kind = 'direct' as const
  readonly closed: Promise<void>
  private readonly queue: FrameQueue
  private readonly writeHighWaterMark: number
  private readonly creditEvery: number
  /** Bytes written and not yet flushed to the socket. */
  private unflushed = 0
  private unread = 0
  private waiters: Array<() => void> = []
  private writeEnded = false
  private writeClosed: (() => void) | null = null
  private isClosed = false
  private markClosed!: () => void

  constructor (private readonly link: ThreadLink, readonly id: number, readonly remotePeer: string, readonly protocol: string, options: ThreadChannelOptions) {
    this.writeHighWaterMark = options.writeHighWaterMark ?? 4 * 1024 * 1024
    this.creditEvery = Math.max(1, Math.floor(options.maxQueuedFrames / 2))
    this.closed = new Promise(resolve => { this.markClosed = resolve })
    // The data thread stops sending at maxQueuedFrames unread, so the queue itself never pauses.
    this.queue = new FrameQueue({
      pause: () => {},
      resume: () => {},
      violate: (err) => { this.abort(err) },
      describePeer: () => remotePeer
    }, { maxFrameBytes: options.maxFrameBytes, maxQueuedFrames: options.maxQueuedFrames + 1 })
  }

  async read (timeoutMs?: number): Promise<Uint8Array | null> {
    const frame = await this.queue.read(timeoutMs)
    if (frame != null) this.consumed()
    return frame
  }

  async readPieces (timeoutMs?: number): Promise<Uint8ArrayList | null> {
    const frame = await this.queue.readPieces(timeoutMs)
    if (frame != null) this.consumed()
    return frame
  }

  async write (payload: Uint8Array | readonly Uint8Array[], flushed?: Flushed): Promise<void> {
    const failure = this.queue.error
    if (failure != null) throw failure
    if (this.isClosed || this.writeEnded) throw new ProtocolError(`connection to ${this.remotePeer} is closed for writing`)
    const pieces = payloadPieces(payload)
    const length = payloadBytes(pieces)
    const buf = this.link.buffer(length)
    const bytes = new Uint8Array(buf)
    let offset = 0
    for (const piece of pieces) {
      bytes.set(piece, offset)
      offset += piece.byteLength
    }
    this.unflushed += length
    this.link.post({ t: 'write', id: this.id, buf, length }, [buf])
    // The pieces were copied into buf: the caller may reuse their memory at once.
    flushed?.()
    while (this.unflushed > this.writeHighWaterMark && !this.isClosed && this.queue.error == null) {
      await new Promise<void>(resolve => { this.waiters.push(resolve) })
    }
  }

  async closeWrite (): Promise<void> {
    if (this.isClosed || this.writeEnded) return
    this.writeEnded = true
    await new Promise<void>(resolve => {
      this.writeClosed = resolve
      this.link.post({ t: 'closeWrite', id: this.id })
    })
  }

  abort (reason: Error): void {
    this.queue.fail(reason)
    this.wakeWriters()
    if (!this.isClosed) this.link.post({ t: 'abort', id: this.id, message: reason.message })
  }

  release (frame: Uint8ArrayList): void {
    // Each frame arrived alone in a buffer of its own (onFrame), so one chunk is that buffer.
    const chunks = [...frame]
    if (chunks.length !== 1) return
    const buf = chunks[0].buffer
    if (buf instanceof ArrayBuffer && buf.byteLength <= MAX_RELEASED_FRAME_BYTES) this.link.post({ t: 'release', buf }, [buf])
  }

  /** A frame from the data thread (header included). */
  onFrame (buf: ArrayBuffer, length: number): void {
    this.queue.push(new Uint8Array(buf, 0, length))
  }

  onWritten (bytes: number, bufs: readonly ArrayBuffer[]): void {
    this.unflushed -= bytes
    for (const buf of bufs) this.link.recycle(buf)
    if (this.unflushed <= this.writeHighWaterMark) this.wakeWriters()
  }

  onWriteClosed (): void {
    this.writeClosed?.()
    this.writeClosed = null
  }

  onEnd (): void {
    this.queue.end()
  }

  onFailed (message: string): void {
    this.queue.fail(new ProtocolError(message))
    this.wakeWriters()
  }

  onClosed (): void {
    this.isClosed = true
    this.queue.end()
    this.wakeWriters()
    this.onWriteClosed()
    this.markClosed()
  }

  private consumed (): void {
    if (++this.unread < this.creditEvery) return
    this.link.post({ t: 'credit', id: this.id, frames: this.unread })
    this.unread = 0
  }

  private wakeWriters (): void {
    const waiters = this.waiters
    this.waiters = []
    for (const wake of waiters) wake()
  }
}
