import { FrameQueue, frameHeader, payloadBytes, payloadPieces, type FrameChannel, type Flushed } from '../../../agent/net/frame-channel.js'

/** One end of an in-memory frame channel; frames written on one end are read on the other. */
export class MemoryChannel implements FrameChannel {
  readonly kind = 'libp2p' as const
  other!: MemoryChannel
  readonly queue: FrameQueue
  constructor (readonly remotePeer: string) {
    this.queue = new FrameQueue({
      pause: () => {},
      resume: () => {},
      violate: (err) => { this.queue.fail(err) },
      describePeer: () => this.remotePeer
    }, { maxFrameBytes: 1 << 24, maxQueuedFrames: 1 << 20 })
  }

  static pair (a: string, b: string): [MemoryChannel, MemoryChannel] {
    const toB = new MemoryChannel(b)
    const toA = new MemoryChannel(a)
    toB.other = toA
    toA.other = toB
    return [toB, toA]
  }

  async read (timeoutMs?: number): Promise<Uint8Array | null> { return await this.queue.read(timeoutMs) }
  async readPieces (timeoutMs?: number): ReturnType<FrameChannel['readPieces']> { return await this.queue.readPieces(timeoutMs) }
  async write (payload: Uint8Array | readonly Uint8Array[], flushed?: Flushed): Promise<void> {
    const pieces = payloadPieces(payload)
    const frame = new Uint8Array(4 + payloadBytes(pieces))
    frame.set(frameHeader(frame.byteLength - 4))
    let at = 4
    for (const p of pieces) { frame.set(p, at); at += p.byteLength }
    // Copied: the pieces' memory may be reused at once, as over a data thread.
    flushed?.()
    this.other.queue.push(frame)
    await new Promise(resolve => setImmediate(resolve))
  }

  async closeWrite (): Promise<void> { this.other.queue.end() }
  abort (reason: Error): void { this.queue.fail(reason); this.other.queue.fail(reason) }
}
