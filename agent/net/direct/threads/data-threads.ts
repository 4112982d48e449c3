import { Worker } from 'node:worker_threads'
import { ProtocolError, TimeoutError } from '../../../errors.js'
import type { DirectFrameChannel } from '../../frame-channel.js'
import type { DirectDialOptions } from '../direct-dial.js'
import type { DirectListener, DirectListenOptions, DirectTransport } from '../direct-transport.js'
import { ThreadFrameChannel, type ThreadLink } from './thread-channel.js'
import type { FromDataThread, ToDataThread } from './thread-messages.js'
import { Outbox } from './outbox.js'
import { BufferPool } from './buffer-pool.js'
import type { Log } from '../../../log.js'


type FrameBounds = { readonly maxFrameBytes: number, readonly maxQueuedFrames: number }
/** A request awaiting its reply; a dial's carries the bounds of the channel it opens. */
type Pending = { resolve: (message: FromDataThread) => void, reject: (err: Error) => void, frames?: FrameBounds }

/** One data thread, seen from the main thread: requests, its channels and its write buffers. */
class DataThread implements ThreadLink {
  private readonly worker: Worker
  private readonly outbox: Outbox<ToDataThread>
  private readonly pending = new Map<number, Pending>()
  private readonly channels = new Map<number, ThreadFrameChannel>()
  private readonly listeners = new Map<number, DirectListenOptions>()
  private readonly writePool = new BufferPool()
  private nextReq = 1
  private failure: Error | null = null

  constructor (private readonly log?: Log) {
    this.worker = new Worker(new URL('./data-thread.js', import.meta.url))
    // The agent decides when to stop; a data thread alone never holds the process open.
    this.worker.unref()
    this.outbox = new Outbox((messages, transfer) => { this.worker.postMessage(messages, transfer) })
    this.worker.on('message', (messages: FromDataThread[]) => { for (const message of messages) this.receive(message) })
    this.worker.on('error', (err) => { this.fail(new ProtocolError(`a data thread failed: ${err.message}`)) })
    this.worker.on('exit', () => { this.fail(new ProtocolError('a data thread exited')) })
  }

  /** False once the thread failed or was stopped. */
  get alive (): boolean { return this.failure == null }

  post (message: ToDataThread, transfer: ArrayBuffer[] = []): void {
    if (this.failure == null) this.outbox.post(message, transfer)
  }

  buffer (bytes: number): ArrayBuffer {
    return this.writePool.take(bytes)
  }

  recycle (buf: ArrayBuffer): void {
    this.writePool.give(buf)
  }

  async dial (options: DirectDialOptions): Promise<DirectFrameChannel> {
    const reply = await this.request(req => ({
      t: 'dial',
      req,
      options: {
        identity: options.identity,
        host: options.host,
        port: options.port,
        protocols: options.protocols,
        expectedPeer: options.expectedPeer.toString(),
        timeoutMs: options.timeoutMs,
        maxFrameBytes: options.maxFrameBytes,
        maxQueuedFrames: options.maxQueuedFrames
      }
    }), options)
    const channel = reply.t === 'dialed' ? this.channels.get(reply.id) : undefined
    if (channel == null) throw new ProtocolError(`the direct channel to ${options.host}:${options.port} closed as it opened`)
    return channel
  }

  async listen (options: DirectListenOptions, port: number): Promise<{ listener: number, port: number }> {
    const reply = await this.request(req => ({
      t: 'listen',
      req,
      options: {
        identity: options.identity,
        host: options.host,
        port,
        protocols: options.protocols,
        maxFrameBytes: options.maxFrameBytes,
        maxQueuedFrames: options.maxQueuedFrames,
        handshakeTimeoutMs: options.handshakeTimeoutMs,
        askAllow: options.allowPeer != null
      }
    }))
    if (reply.t !== 'listening') throw new ProtocolError('a data thread answered a listen with something else')
    this.listeners.set(reply.listener, options)
    return { listener: reply.listener, port: reply.port }
  }

  async closeListener (listener: number): Promise<void> {
    this.listeners.delete(listener)
    await this.request(req => ({ t: 'closeListener', req, listener })).catch(() => {})
  }

  /** Resolves once the thread runs (its modules loaded) or has failed. */
  async ready (): Promise<void> {
    await this.request(req => ({ t: 'ready', req })).catch(() => {})
  }

  async stop (): Promise<void> {
    await this.request(req => ({ t: 'stop', req })).catch(() => {})
    this.failure ??= new ProtocolError('the data thread stopped')
    await this.worker.terminate()
  }

  private async request (build: (req: number) => ToDataThread, frames?: FrameBounds): Promise<FromDataThread> {
    if (this.failure != null) throw this.failure
    const req = this.nextReq++
    const reply = await new Promise<FromDataThread>((resolve, reject) => {
      this.pending.set(req, { resolve, reject, frames })
      this.post(build(req))
    })
    if (reply.t === 'refused') throw reply.timeout ? new TimeoutError(reply.message) : new ProtocolError(reply.message)
    return reply
  }

  private adopt (id: number, peer: string, protocol: string, options: FrameBounds): ThreadFrameChannel {
    const channel = new ThreadFrameChannel(this, id, peer, protocol, options)
    this.channels.set(id, channel)
    void channel.closed.then(() => this.channels.delete(id))
    return channel
  }

  private receive (message: FromDataThread): void {
    switch (message.t) {
      case 'frame': this.channels.get(message.id)?.onFrame(message.buf, message.length); break
      case 'written': this.channels.get(message.id)?.onWritten(message.bytes, message.bufs); break
      case 'writeClosed': this.channels.get(message.id)?.onWriteClosed(); break
      case 'end': this.channels.get(message.id)?.onEnd(); break
      case 'failed': this.channels.get(message.id)?.onFailed(message.message); break
      case 'closed': this.channels.get(message.id)?.onClosed(); break
      case 'log': this.log?.[message.level](message.message); break
      case 'incoming': {
        const options = this.listeners.get(message.listener)
        const channel = this.adopt(message.id, message.peer, message.protocol, options ?? { maxFrameBytes: 0, maxQueuedFrames: 1 })
        if (options != null) options.accept(channel)
        else channel.abort(new ProtocolError('the listener is closed'))
        break
      }
      case 'allow': {
        const allow = this.listeners.get(message.listener)?.allowPeer
        void Promise.resolve(allow?.(message.peer) ?? false)
          .catch(() => false)
          .then(ok => { this.post({ t: 'allowed', req: message.req, ok }) })
        break
      }
      default: {
        const pending = this.pending.get(message.req)
        this.pending.delete(message.req)
        // Adopted now, not after the caller resumes: the channel's first frames may be in the next message.
        if (message.t === 'dialed') {
          const channel = this.adopt(message.id, message.peer, message.protocol, pending?.frames ?? { maxFrameBytes: 0, maxQueuedFrames: 1 })
          if (pending == null) channel.abort(new ProtocolError('nobody waits for this channel'))
        }
        pending?.resolve(message)
      }
    }
  }

  private fail (err: Error): void {
    if (this.failure != null) return
    this.failure = err
    this.log?.warn(`${err.message}; its ${this.channels.size} connection(s) are dropped and the other data threads carry on`)
    for (const pending of this.pending.values()) pending.reject(err)
    this.pending.clear()
    for (const channel of this.channels.values()) {
      channel.onFailed(err.message)
      channel.onClosed()
    }
    this.channels.clear()
  }
}

/**
 * The direct data channel spread over worker threads: each thread listens on the same port
 * (SO_REUSEPORT, so the kernel spreads inbound connections) and dials its share of outbound
 * ones, running TLS, the certificate check and framing off the main thread.
 */
export class DataThreads implements DirectTransport {
  private next = 0

  private constructor (private readonly pool: readonly DataThread[]) {}

  static start (count: number, log?: Log): DataThreads {
    if (!Number.isInteger(count) || count < 1) throw new RangeError(`data threads must be a whole number >= 1, got ${count}`)
    return new DataThreads(Array.from({ length: count }, () => new DataThread(log)))
  }

  get threads (): number { return this.pool.length }

  /**
   * Resolves once every thread has loaded its modules (or failed: the others carry its share). A
   * thread loads them when it starts, and a listener waits for that; a client-mode agent listens
   * nowhere, so without this its first round's dials waited for it: 3.5 s under two CPU burners
   * and a build, and its group cut it off as a sender that never connected.
   */
  async ready (): Promise<void> {
    await Promise.all(this.pool.map(async thread => { await thread.ready() }))
  }

  /** Dials from the next live thread in turn: a failed thread's share goes to the others. */
  async dial (options: DirectDialOptions): Promise<DirectFrameChannel> {
    for (let tried = 0; tried < this.pool.length; tried++) {
      const thread = this.pool[this.next++ % this.pool.length]
      if (thread.alive) return await thread.dial(options)
    }
    throw new ProtocolError('every data thread has failed')
  }

  async listen (options: DirectListenOptions): Promise<DirectListener> {
    // The first thread picks the port (0: any free one); the others join it on the same port.
    const first = await this.pool[0].listen(options, options.port)
    const rest = await Promise.allSettled(this.pool.slice(1).map(async thread => await thread.listen(options, first.port)))
    const opened = [{ status: 'fulfilled' as const, value: first }, ...rest]
    const close = async (): Promise<void> => {
      await Promise.all(opened.map(async (result, i) => { if (result.status === 'fulfilled') await this.pool[i].closeListener(result.value.listener) }))
    }
    const failed = rest.find(result => result.status === 'rejected')
    if (failed != null) {
      await close()
      throw failed.reason
    }
    return { port: first.port, close }
  }

  async close (): Promise<void> {
    await Promise.all(this.pool.map(async thread => { await thread.stop() }))
  }
}
