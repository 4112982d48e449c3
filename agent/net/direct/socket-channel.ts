import type { Socket } from 'node:net'
import type { Uint8ArrayList } from 'uint8arraylist'
import { ProtocolError } from '../../errors.js'
import { FrameQueue, frameHeader, payloadBytes, payloadPieces, type DirectFrameChannel, type Flushed } from '../frame-channel.js'
import { readInPlace } from './read-in-place.js'
import { lendWireMemory, returnWireMemory } from '../wire-memory.js'

export interface SocketChannelOptions {
  /** The protocol the TLS handshake agreed on (ALPN). */
  readonly protocol: string
  readonly maxFrameBytes: number
  readonly maxQueuedFrames?: number
  /** Bytes allowed in the socket's send buffer before write() waits for 'drain'. */
  readonly writeHighWaterMark?: number
}

/**
 * Length-prefixed frames over a node socket (a mutually authenticated TLS socket of the direct
 * data channel). The socket's own buffers and pause/resume carry back-pressure both ways.
 */
export class SocketFrameChannel implements DirectFrameChannel {
  private readonly queue: FrameQueue
  private readonly writeHighWaterMark: number
  readonly kind = 'direct' as const
  /** Whether the socket reads straight into frame memory (readInPlace), or hands over its own buffers. */
  readonly readsInPlace: boolean
  readonly protocol: string
  /** Resolves once the socket is fully closed. */
  readonly closed: Promise<void>

  constructor (private readonly socket: Socket, readonly remotePeer: string, options: SocketChannelOptions) {
    this.protocol = options.protocol
    this.writeHighWaterMark = options.writeHighWaterMark ?? 4 * 1024 * 1024
    this.queue = new FrameQueue({
      pause: () => { socket.pause() },
      resume: () => { socket.resume() },
      violate: (err) => { this.abort(err) },
      describePeer: () => remotePeer
    }, { maxFrameBytes: options.maxFrameBytes, maxQueuedFrames: options.maxQueuedFrames ?? 8, frameMemory: lendWireMemory })
    socket.setNoDelay(true)
    this.readsInPlace = readInPlace(socket, this.queue)
    if (!this.readsInPlace) socket.on('data', (chunk: Buffer) => { this.queue.push(chunk) })
    socket.on('end', () => { this.queue.end() })
    socket.on('error', (err) => { this.queue.fail(new ProtocolError(`connection to ${remotePeer} failed: ${err.message}`)) })
    // Protocol code counts the frames it is owed, so an early clean close is still caught there.
    this.closed = new Promise(resolve => socket.once('close', () => { resolve() }))
    socket.on('close', () => { this.queue.end() })
  }

  async read (timeoutMs?: number): Promise<Uint8Array | null> {
    return await this.queue.read(timeoutMs)
  }

  async readPieces (timeoutMs?: number): Promise<Uint8ArrayList | null> {
    return await this.queue.readPieces(timeoutMs)
  }

  release (frame: Uint8ArrayList): void {
    // A frame read in place is one piece of lent memory; anything else was never lent.
    for (const piece of frame) {
      returnWireMemory(piece)
      return
    }
  }

  /**
   * flushed, when given, is called once the socket holds no reference to the pieces any more
   * (with an error if the connection broke first).
   */
  async write (payload: Uint8Array | readonly Uint8Array[], flushed?: Flushed): Promise<void> {
    const failure = this.queue.error
    if (failure != null) throw failure
    if (this.socket.destroyed || !this.socket.writable) throw new ProtocolError(`connection to ${this.remotePeer} is closed for writing`)
    const pieces = payloadPieces(payload)
    // Corked: the header and pieces leave in one writev, and TLS encrypts them as they are written.
    this.socket.cork()
    this.socket.write(frameHeader(payloadBytes(pieces)), pieces.length === 0 ? flushed : undefined)
    pieces.forEach((piece, i) => this.socket.write(piece, i === pieces.length - 1 ? flushed : undefined))
    this.socket.uncork()
    while (this.socket.writableLength > this.writeHighWaterMark && !this.socket.destroyed) {
      await new Promise<void>(resolve => {
        const done = (): void => {
          this.socket.off('drain', done)
          this.socket.off('close', done)
          resolve()
        }
        this.socket.on('drain', done)
        this.socket.on('close', done)
      })
    }
  }

  async closeWrite (): Promise<void> {
    if (this.socket.destroyed || this.socket.writableEnded) return
    await new Promise<void>(resolve => { this.socket.end(resolve) })
  }

  abort (reason: Error): void {
    this.queue.fail(reason)
    this.socket.destroy()
  }
}
