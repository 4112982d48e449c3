import { Uint8ArrayList } from 'uint8arraylist'
import type { Stream } from '@libp2p/interface'
import { ProtocolError } from '../errors.js'
import { FrameQueue, frameHeader, payloadBytes, payloadPieces, type FrameChannel } from './frame-channel.js'

export interface FramedStreamOptions {
  /** Largest frame accepted from the wire; a larger announced length aborts the stream before any allocation. */
  readonly maxFrameBytes: number
  /** Decoded frames held before the stream is paused (flow control reaches the sender through yamux windows). */
  readonly maxQueuedFrames?: number
  /** Bytes allowed in the send buffer before write() waits for it to drain. */
  readonly writeHighWaterMark?: number
}

/**
 * Length-prefixed frames over a libp2p stream, with bounds checked before allocation and
 * back-pressure both ways. One reader and one writer may use it concurrently.
 */
export class FramedStream implements FrameChannel {
  private readonly queue: FrameQueue
  private readonly writeHighWaterMark: number
  readonly kind = 'libp2p' as const

  constructor (readonly stream: Stream, options: FramedStreamOptions) {
    this.writeHighWaterMark = options.writeHighWaterMark ?? 4 * 1024 * 1024
    this.queue = new FrameQueue({
      // Only a readable stream pauses, only a paused one resumes: once the remote's end and every byte
      // before it were handed to us, libp2p closes the readable side, and both would throw.
      pause: () => { if (stream.readStatus === 'readable') stream.pause() },
      resume: () => { if (stream.readStatus === 'paused') stream.resume() },
      violate: (err) => { this.abort(err) },
      describePeer: () => this.remotePeer
    }, { maxFrameBytes: options.maxFrameBytes, maxQueuedFrames: options.maxQueuedFrames ?? 8 })
    // While paused the remote may still fill its yamux window: keep room for it.
    stream.maxReadBufferLength = Math.max(stream.maxReadBufferLength, 64 * 1024 * 1024)
    stream.addEventListener('message', (evt) => { this.queue.push(evt.data) })
    // The clean end is 'end' alone: libp2p dispatches it once the remote closed its side and every
    // byte read was handed to us. 'remoteCloseWrite', and 'close' once both sides closed, come as
    // the FIN arrives, while a stream we paused still holds unread bytes; ending the queue on them
    // cut a reader off inside a frame (over libp2p under two CPU burners, 4 peers × 4M floats: "peer
    // closed the stream in the middle of a message" in 3 of 10 rounds, a reducer's means half read).
    stream.addEventListener('end', () => { this.queue.end() })
    stream.addEventListener('close', (evt) => {
      if (evt.error != null) this.queue.fail(new ProtocolError(`stream closed: ${evt.error.message}`))
    })
  }

  get remotePeer (): string {
    return (this.stream as unknown as { remotePeer?: { toString(): string } }).remotePeer?.toString() ?? 'unknown'
  }

  async read (timeoutMs?: number): Promise<Uint8Array | null> {
    return await this.queue.read(timeoutMs)
  }

  async readPieces (timeoutMs?: number): Promise<Uint8ArrayList | null> {
    return await this.queue.readPieces(timeoutMs)
  }

  /** Takes no `flushed` (FrameChannel.write): yamux keeps the pieces until it writes them, and does not say when. */
  async write (payload: Uint8Array | readonly Uint8Array[]): Promise<void> {
    if (this.queue.error != null) throw this.queue.error
    const pieces = payloadPieces(payload)
    this.stream.send(new Uint8ArrayList(frameHeader(payloadBytes(pieces)), ...pieces))
    // Not stream.onDrain(): in @libp2p/utils 7.4 its promise resolves at once after the first
    // drain, and a loop on it spins without yielding to the socket (bench/README.md).
    while (this.stream.writeBufferLength > this.writeHighWaterMark && this.stream.status === 'open' && this.queue.error == null) {
      await new Promise<void>(resolve => {
        const done = (): void => {
          for (const event of ['drain', 'idle', 'close'] as const) this.stream.removeEventListener(event, done)
          resolve()
        }
        for (const event of ['drain', 'idle', 'close'] as const) this.stream.addEventListener(event, done)
      })
    }
  }

  async closeWrite (): Promise<void> {
    if (this.stream.status === 'open') await this.stream.close().catch(() => {})
  }

  abort (reason: Error): void {
    this.queue.fail(reason)
    this.stream.abort(reason)
  }
}
