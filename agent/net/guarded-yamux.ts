import { yamux, type YamuxMuxerInit } from '@libp2p/yamux'
import type { MessageStream, MessageStreamWriteStatus, StreamMuxerFactory } from '@libp2p/interface'
import type { Uint8ArrayList } from 'uint8arraylist'

/**
 * yamux as libp2p ships it, except that a frame for a connection that is closing or closed for
 * writing is dropped, not thrown. yamux opens an outbound stream and sends the stream's first
 * window update from a queued microtask; when the connection began closing for writing while its
 * muxer was still open (the peer died as we opened a stream to it), that send threw
 * StreamStateError from the microtask, where nothing catches it, and the whole process exited:
 * 64 agents in one process with 10 % of them crashing a round (bench:moshpit-scale), and so any
 * agent opening a stream on a connection that was going away. Dropping the frame loses nothing:
 * the connection's close ends the muxer and every stream on it. @libp2p/yamux 8.0.3 (the latest).
 */
export function guardedYamux (init: YamuxMuxerInit = {}): () => StreamMuxerFactory {
  const make = yamux(init)
  return () => {
    const factory = make()
    const create = factory.createStreamMuxer.bind(factory)
    factory.createStreamMuxer = (maConn: MessageStream) => {
      const muxer = create(maConn)
      const send = muxer.send.bind(muxer)
      muxer.send = (data: Uint8Array | Uint8ArrayList): boolean => writable(maConn) ? send(data) : true
      return muxer
    }
    return factory
  }
}

/** Whether the connection still takes frames: its send() throws once it is closing or closed for writing (AbstractMessageStream). */
function writable (maConn: MessageStream): boolean {
  const status = (maConn as { writeStatus?: MessageStreamWriteStatus }).writeStatus
  return status !== 'closing' && status !== 'closed'
}
