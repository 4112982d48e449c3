/**
 * A data thread: runs TLS, the certificate check and framing for a share of the direct data
 * channel's connections, so the agent's main thread keeps only the protocol and the kernels.
 * Started by DataThreads; talks to the main thread only through thread-messages.ts.
 */
import { parentPort } from 'node:worker_threads'
import { peerIdFromString } from '@libp2p/peer-id'
import { FRAME_HEADER_BYTES } from '../../frame-channel.js'
import { TimeoutError, describeError } from '../../../errors.js'
import { dialDirect } from '../direct-dial.js'
import { DirectServer } from '../direct-server.js'
import type { SocketFrameChannel } from '../socket-channel.js'
import type { FromDataThread, ListenRequest, DialRequest, ToDataThread } from './thread-messages.js'
import { Outbox } from './outbox.js'
import { BufferPool } from './buffer-pool.js'
import type { Log } from '../../../log.js'

if (parentPort == null) throw new Error('data-thread.js runs as a worker thread started by DataThreads')
const port = parentPort

const relays = new Map<number, Relay>()
const listeners = new Map<number, DirectServer>()
const allowReplies = new Map<number, (ok: boolean) => void>()
let nextId = 1
/** Frame buffers the main thread gave back, reused for the next frames. */
const framePool = new BufferPool()

const outbox = new Outbox<FromDataThread>((messages, transfer) => { port.postMessage(messages, transfer) })
function post (message: FromDataThread, transfer: ArrayBuffer[] = []): void {
  outbox.post(message, transfer)
}

/** The servers' log, posted to the main thread, which writes it to the agent's log at the same level. */
const postedLog: Log = {
  debug: (message) => { post({ t: 'log', level: 'debug', message }) },
  info: (message) => { post({ t: 'log', level: 'info', message }) },
  warn: (message) => { post({ t: 'log', level: 'warn', message }) },
  error: (message) => { post({ t: 'log', level: 'error', message }) },
  child: () => postedLog
}

/** Flushed bytes reported to the main thread together: well below its 4 MiB of writes in flight. */
const WRITTEN_REPORT_BYTES = 1024 * 1024

/** Moves one connection's frames to the main thread (at most `window` unread there) and its writes to the socket. */
class Relay {
  private unread = 0
  private writesPending = 0
  private flushedBytes = 0
  private flushedBufs: ArrayBuffer[] = []
  private wake: (() => void) | null = null
  private stopped = false

  constructor (readonly id: number, private readonly channel: SocketFrameChannel, private readonly window: number) {
    void channel.closed.then(() => {
      this.stop()
      relays.delete(id)
      post({ t: 'closed', id })
    })
    void this.pump()
  }

  credit (frames: number): void {
    this.unread -= frames
    this.wake?.()
  }

  write (buf: ArrayBuffer, length: number): void {
    this.writesPending++
    this.channel.write(new Uint8Array(buf, 0, length), (err) => {
      this.writesPending--
      if (err != null) {
        post({ t: 'failed', id: this.id, message: describeError(err) })
        return
      }
      this.flushedBytes += length
      this.flushedBufs.push(buf)
      // Reported in batches, and whenever nothing is left to flush, so the main thread never waits on a report we hold.
      if (this.flushedBytes >= WRITTEN_REPORT_BYTES || this.writesPending === 0) {
        post({ t: 'written', id: this.id, bytes: this.flushedBytes, bufs: this.flushedBufs }, this.flushedBufs)
        this.flushedBytes = 0
        this.flushedBufs = []
      }
    }).catch((err) => {
      // Refused before reaching the socket: the flush callback never runs.
      this.writesPending--
      post({ t: 'failed', id: this.id, message: describeError(err) })
    })
  }

  closeWrite (): void {
    void this.channel.closeWrite().finally(() => { post({ t: 'writeClosed', id: this.id }) })
  }

  abort (message: string): void {
    this.channel.abort(new Error(message))
  }

  private stop (): void {
    this.stopped = true
    this.wake?.()
  }

  private async pump (): Promise<void> {
    try {
      for (;;) {
        while (this.unread >= this.window && !this.stopped) await new Promise<void>(resolve => { this.wake = resolve })
        this.wake = null
        if (this.stopped) return
        const frame = await this.channel.readPieces()
        if (frame == null) {
          post({ t: 'end', id: this.id })
          return
        }
        // One copy, here rather than on the main thread: the frame's chunks joined behind its header.
        const length = FRAME_HEADER_BYTES + frame.byteLength
        const buf = framePool.take(length)
        const bytes = new Uint8Array(buf, 0, length)
        new DataView(buf).setUint32(0, frame.byteLength, true)
        let offset = FRAME_HEADER_BYTES
        for (const chunk of frame) {
          bytes.set(chunk, offset)
          offset += chunk.byteLength
        }
        this.channel.release(frame)
        this.unread++
        post({ t: 'frame', id: this.id, buf, length }, [buf])
      }
    } catch (err) {
      post({ t: 'failed', id: this.id, message: describeError(err) })
    }
  }
}

function adopt (channel: SocketFrameChannel, window: number): number {
  const id = nextId++
  relays.set(id, new Relay(id, channel, window))
  return id
}

async function listen (req: number, options: ListenRequest): Promise<void> {
  const listener = nextId++
  try {
    const server = await DirectServer.listen({
      ...options,
      reusePort: true,
      allowPeer: options.askAllow
        ? async (peer) => await new Promise<boolean>(resolve => {
          const ask = nextId++
          allowReplies.set(ask, resolve)
          post({ t: 'allow', req: ask, listener, peer })
        })
        : undefined,
      accept: (channel) => { post({ t: 'incoming', listener, id: adopt(channel, options.maxQueuedFrames), peer: channel.remotePeer, protocol: channel.protocol }) },
      log: postedLog
    })
    listeners.set(listener, server)
    post({ t: 'listening', req, listener, port: server.port })
  } catch (err) {
    post({ t: 'refused', req, message: describeError(err), timeout: false })
  }
}

async function dial (req: number, options: DialRequest): Promise<void> {
  try {
    const channel = await dialDirect({ ...options, expectedPeer: peerIdFromString(options.expectedPeer) })
    post({ t: 'dialed', req, id: adopt(channel, options.maxQueuedFrames), peer: channel.remotePeer, protocol: channel.protocol })
  } catch (err) {
    post({ t: 'refused', req, message: describeError(err), timeout: err instanceof TimeoutError })
  }
}

async function stop (req: number): Promise<void> {
  for (const relay of relays.values()) relay.abort('the data thread is stopping')
  await Promise.all([...listeners.values()].map(async server => { await server.close() }))
  listeners.clear()
  post({ t: 'done', req })
}

port.on('message', (messages: ToDataThread[]) => { for (const message of messages) receive(message) })

function receive (message: ToDataThread): void {
  switch (message.t) {
    case 'write': relays.get(message.id)?.write(message.buf, message.length); break
    case 'credit': relays.get(message.id)?.credit(message.frames); break
    case 'release': framePool.give(message.buf); break
    case 'closeWrite': relays.get(message.id)?.closeWrite(); break
    case 'abort': relays.get(message.id)?.abort(message.message); break
    case 'dial': void dial(message.req, message.options); break
    case 'listen': void listen(message.req, message.options); break
    case 'allowed': allowReplies.get(message.req)?.(message.ok); allowReplies.delete(message.req); break
    case 'closeListener': {
      const server = listeners.get(message.listener)
      listeners.delete(message.listener)
      void (server?.close() ?? Promise.resolve()).then(() => { post({ t: 'done', req: message.req }) })
      break
    }
    case 'stop': void stop(message.req); break
    case 'ready': post({ t: 'done', req: message.req }); break
  }
}
