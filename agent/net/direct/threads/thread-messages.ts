/**
 * Messages between the agent's main thread and a data thread. Channel ids are the data thread's
 * own; request ids are the main thread's. Frame bytes travel as transferred ArrayBuffers, never
 * cloned.
 */

import type { DirectDialOptions } from '../direct-dial.js'
import type { DirectServerOptions } from '../direct-server.js'
import type { LogLevel } from '../../../log.js'

/** A server's options as plain data: the callbacks stay on the main thread. */
export type ListenRequest = Pick<DirectServerOptions, 'identity' | 'host' | 'port' | 'protocols' | 'maxFrameBytes' | 'maxQueuedFrames' | 'handshakeTimeoutMs'> & {
  /** Ask the main thread whether a peer may connect (allowPeer); off: any authenticated peer. */
  readonly askAllow: boolean
}

/** A dial's options as plain data: the expected peer as its string id. */
export type DialRequest = Omit<DirectDialOptions, 'expectedPeer'> & { readonly expectedPeer: string }

export type ToDataThread =
  | { readonly t: 'listen', readonly req: number, readonly options: ListenRequest }
  | { readonly t: 'closeListener', readonly req: number, readonly listener: number }
  | { readonly t: 'allowed', readonly req: number, readonly ok: boolean }
  | { readonly t: 'dial', readonly req: number, readonly options: DialRequest }
  /** One frame's payload in buf[0, length); the data thread adds the header. */
  | { readonly t: 'write', readonly id: number, readonly buf: ArrayBuffer, readonly length: number }
  /** The main thread consumed this many more frames of the channel. */
  | { readonly t: 'credit', readonly id: number, readonly frames: number }
  /** A frame's buffer, back for the data thread to reuse. */
  | { readonly t: 'release', readonly buf: ArrayBuffer }
  | { readonly t: 'closeWrite', readonly id: number }
  | { readonly t: 'abort', readonly id: number, readonly message: string }
  | { readonly t: 'stop', readonly req: number }
  /** Answered with done once the thread's modules are loaded: the agent waits for it at start (DataThreads.ready). */
  | { readonly t: 'ready', readonly req: number }

export type FromDataThread =
  | { readonly t: 'listening', readonly req: number, readonly listener: number, readonly port: number }
  | { readonly t: 'done', readonly req: number }
  | { readonly t: 'refused', readonly req: number, readonly message: string, readonly timeout: boolean }
  | { readonly t: 'allow', readonly req: number, readonly listener: number, readonly peer: string }
  | { readonly t: 'incoming', readonly listener: number, readonly id: number, readonly peer: string, readonly protocol: string }
  | { readonly t: 'dialed', readonly req: number, readonly id: number, readonly peer: string, readonly protocol: string }
  /** One received frame, header included, in buf[0, length). */
  | { readonly t: 'frame', readonly id: number, readonly buf: ArrayBuffer, readonly length: number }
  /** Writes flushed to the socket (TLS holds no reference to them any more): their bytes, and their buffers back for reuse. */
  | { readonly t: 'written', readonly id: number, readonly bytes: number, readonly bufs: ArrayBuffer[] }
  | { readonly t: 'writeClosed', readonly id: number }
  /** The remote closed its side cleanly between frames. */
  | { readonly t: 'end', readonly id: number }
  | { readonly t: 'failed', readonly id: number, readonly message: string }
  | { readonly t: 'closed', readonly id: number }
  | { readonly t: 'log', readonly level: LogLevel, readonly message: string }
