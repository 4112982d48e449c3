import { Uint8ArrayList } from 'uint8arraylist'
import type { Stream } from '@libp2p/interface'
import { ProtocolError, TimeoutError } from '../errors.js'

/** Bytes of the little-endian uint32 length header in front of every frame. */
const HEADER_BYTES = 4

export interface FramedStreamOptions {
  /** Largest frame accepted from the wire; a larger announced length aborts the stream before any allocation. */
  readonly maxFrameBytes: number
  /** Decoded frames held before the stream is paused (flow control reaches the sender through yamux windows). */
  readonly maxQueuedFrames?: number
  /** Bytes allowed in the send buffer before write() waits for it to drain. */
  readonly writeHighWaterMark?: number
}

type Waiter = { resolve: (frame: Uint8Array | null) => void, reject: (err: Error) => void }

/**
 * Length-prefixed frames over a libp2p stream, with bounds checked before allocation and
 * back-pressure both ways. One reader and one writer may use it concurrently.
 */
export class FramedStream {
  private readonly buffer = new Uint8ArrayList()
  private readonly frames: Uint8Array[] = []
  private waiter: Waiter | null = null
  private ended = false
  private failure: Error | null = null
  private paused = false
  private readonly maxFrameBytes: number
  private readonly maxQueuedFrames: number
  private readonly writeHighWaterMark: number

  constructor (readonly stream: Stream, options: FramedStreamOptions) {
    this.maxFrameBytes = options.maxFrameBytes
    this.maxQueuedFrames = options.maxQueuedFrames ?? 8
    this.writeHighWaterMark = options.writeHighWaterMark ?? 4 * 1024 * 1024
    // While paused the remote may still fill its yamux window: keep room for it.
    stream.maxReadBufferLength = Math.max(stream.maxReadBufferLength, 64 * 1024 * 1024)
    stream.addEventListener('message', (evt) => { this.onData(evt.data) })
    stream.addEventListener('remoteCloseWrite', () => { this.onEnd() })
    stream.addEventListener('end', () => { this.onEnd() })
    stream.addEventListener('close', (evt) => {
      if (evt.error != null) this.fail(new ProtocolError(`stream closed: ${evt.error.message}`))
      else this.onEnd()
    })
  }

  get remotePeer (): string {
    return (this.stream as unknown as { remotePeer?: { toString(): string } }).remotePeer?.toString() ?? 'unknown'
  }

  /** Next frame, or null once the remote closed its side cleanly. Rejects on timeout, reset or a protocol violation. */
  async read (timeoutMs?: number): Promise<Uint8Array | null> {
    const frame = this.frames.shift()
    if (frame !== undefined) {
      this.maybeResume()
      return frame
    }
    if (this.failure != null) throw this.failure
    if (this.ended) return null
    return await new Promise<Uint8Array | null>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined
      const clear = (): void => { if (timer !== undefined) clearTimeout(timer); this.waiter = null }
      this.waiter = {
        resolve: (f) => { clear(); resolve(f) },
        reject: (e) => { clear(); reject(e) }
      }
      if (timeoutMs !== undefined && Number.isFinite(timeoutMs)) {
        timer = setTimeout(() => {
          this.waiter = null
          reject(new TimeoutError(`no message from ${this.remotePeer} within ${Math.round(timeoutMs)} ms`))
        }, Math.max(0, timeoutMs))
      }
    })
  }

  /** Send one frame; waits while the send buffer is above the high-water mark. */
  async write (payload: Uint8Array): Promise<void> {
    if (this.failure != null) throw this.failure
    const header = new Uint8Array(HEADER_BYTES)
    new DataView(header.buffer).setUint32(0, payload.byteLength, true)
    this.stream.send(new Uint8ArrayList(header, payload))
    // Not stream.onDrain(): in @libp2p/utils 7.4 its promise resolves at once after the first
    // drain, and a loop on it spins without yielding to the socket (bench/README.md).
    while (this.stream.writeBufferLength > this.writeHighWaterMark && this.stream.status === 'open' && this.failure == null) {
      await new Promise<void>(resolve => {
        const done = (): void => {
          for (const event of ['drain', 'idle', 'close'] as const) this.stream.removeEventListener(event, done)
          resolve()
        }
        for (const event of ['drain', 'idle', 'close'] as const) this.stream.addEventListener(event, done)
      })
    }
  }

  /** Half-close: no more frames from us; the remote reads until our data is drained. */
  async closeWrite (): Promise<void> {
    if (this.stream.status === 'open') await this.stream.close().catch(() => {})
  }

  /** Tear the stream down, failing pending reads with this reason. */
  abort (reason: Error): void {
    this.fail(reason)
    this.stream.abort(reason)
  }

  private onData (data: Uint8Array | Uint8ArrayList): void {
    if (this.failure != null) return
    this.buffer.append(data)
    while (this.buffer.byteLength >= HEADER_BYTES) {
      const length = this.buffer.getUint32(0, true)
      if (length > this.maxFrameBytes) {
        this.abort(new ProtocolError(`peer ${this.remotePeer} announced a ${length}-byte message, above the ${this.maxFrameBytes}-byte bound`))
        return
      }
      if (this.buffer.byteLength < HEADER_BYTES + length) break
      // A copy, not a view: the transport may reuse the memory it handed us once the event returns.
      const frame = this.buffer.slice(HEADER_BYTES, HEADER_BYTES + length)
      this.buffer.consume(HEADER_BYTES + length)
      this.deliver(frame)
    }
    if (this.frames.length >= this.maxQueuedFrames && !this.paused) {
      this.paused = true
      this.stream.pause()
    }
  }

  private deliver (frame: Uint8Array): void {
    const waiter = this.waiter
    if (waiter != null) waiter.resolve(frame)
    else this.frames.push(frame)
  }

  private maybeResume (): void {
    if (this.paused && this.frames.length < this.maxQueuedFrames / 2) {
      this.paused = false
      this.stream.resume()
    }
  }

  private onEnd (): void {
    if (this.ended || this.failure != null) return
    if (this.buffer.byteLength > 0) {
      this.fail(new ProtocolError(`peer ${this.remotePeer} closed the stream in the middle of a message`))
      return
    }
    this.ended = true
    if (this.frames.length === 0) this.waiter?.resolve(null)
  }

  private fail (err: Error): void {
    if (this.failure != null) return
    this.failure = err
    this.frames.length = 0
    this.waiter?.reject(err)
  }
}
