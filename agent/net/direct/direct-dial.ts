import tls from 'node:tls'
import type { PeerId } from '@libp2p/interface'
import { ProtocolError, TimeoutError } from '../../errors.js'
import { authenticatedPeer, DATA_CHANNEL_CIPHERS, type DataChannelIdentity } from './identity.js'
import { SocketFrameChannel } from './socket-channel.js'

export interface DirectDialOptions {
  readonly identity: DataChannelIdentity
  readonly host: string
  readonly port: number
  /** ALPN protocol ids, the preferred first: the server picks one it speaks (a version of the same protocol). */
  readonly protocols: readonly string[]
  /** The peer the server must prove to be; anyone else fails the dial. */
  readonly expectedPeer: PeerId
  readonly timeoutMs: number
  readonly maxFrameBytes: number
  readonly maxQueuedFrames: number
}

/** Opens a mutually authenticated TLS 1.3 connection to a peer's direct data channel. */
export async function dialDirect (options: DirectDialOptions): Promise<SocketFrameChannel> {
  // allowHalfOpen is a documented tls.connect option that @types/node does not list.
  const socket = tls.connect({
    host: options.host,
    port: options.port,
    key: options.identity.key,
    cert: options.identity.cert,
    rejectUnauthorized: false,
    minVersion: 'TLSv1.3',
    ciphers: DATA_CHANNEL_CIPHERS,
    ALPNProtocols: [...options.protocols],
    allowHalfOpen: true
  } as tls.ConnectionOptions)
  // Errors after the handshake reach the channel's own handler; none may go unhandled before it.
  socket.on('error', () => {})
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => { reject(new TimeoutError(`no TLS handshake with ${options.host}:${options.port} within ${options.timeoutMs} ms`)) }, options.timeoutMs)
      socket.once('secureConnect', () => { clearTimeout(timer); resolve() })
      socket.once('error', (err) => { clearTimeout(timer); reject(new ProtocolError(`cannot reach ${options.host}:${options.port}: ${err.message}`)) })
    })
    const protocol = socket.alpnProtocol
    if (typeof protocol !== 'string' || !options.protocols.includes(protocol)) throw new ProtocolError(`${options.host}:${options.port} does not speak ${options.protocols.join(' or ')}`)
    const peer = await authenticatedPeer(socket, options.expectedPeer)
    return new SocketFrameChannel(socket, peer.toString(), { protocol, maxFrameBytes: options.maxFrameBytes, maxQueuedFrames: options.maxQueuedFrames })
  } catch (err) {
    socket.destroy()
    throw err
  }
}
