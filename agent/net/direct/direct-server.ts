import tls from 'node:tls'
import type { AddressInfo, Socket } from 'node:net'
import { describeError } from '../../errors.js'
import type { DataChannelIdentity } from './identity.js'
import { authenticatedPeer, DATA_CHANNEL_CIPHERS } from './identity.js'
import { SocketFrameChannel } from './socket-channel.js'
import type { Log } from '../../log.js'
import { listenOn } from '../../util/ports.js'

/** Open connections (handshaking or not) from one IP address; a group member needs one per round. */
const MAX_CONNECTIONS_PER_ADDRESS = 64

export interface DirectServerOptions {
  readonly identity: DataChannelIdentity
  readonly host: string
  /** 0: any free port (advertised to the group through matchmaking). */
  readonly port: number
  /**
   * ALPN protocol ids, the preferred first (versions of one protocol): one server per protocol and
   * prefix, so nothing else reaches the handler.
   */
  readonly protocols: readonly string[]
  readonly maxFrameBytes: number
  readonly maxQueuedFrames: number
  /** Bound on the TLS handshake plus the certificate check. */
  readonly handshakeTimeoutMs: number
  /** Peers allowed to connect at all; undefined: any authenticated peer. */
  readonly allowPeer?: (peer: string) => boolean | Promise<boolean>
  /**
   * Listen with SO_REUSEPORT, so that several data threads can hold servers on one port and the
   * kernel spreads the connections over them.
   */
  readonly reusePort?: boolean
  readonly accept: (channel: SocketFrameChannel) => void
  readonly log?: Log
}

/**
 * The listening side of the direct data channel: TLS 1.3 with a client certificate required and
 * checked against the libp2p identity it claims. Anything else is dropped without reaching
 * protocol code; a failed connection never affects the others.
 */
export class DirectServer {
  private constructor (private readonly server: tls.Server, private readonly sockets: Set<Socket>) {}

  static async listen (options: DirectServerOptions): Promise<DirectServer> {
    const server = tls.createServer({
      key: options.identity.key,
      cert: options.identity.cert,
      requestCert: true,
      // The chain is not what proves a peer: its libp2p signature is, checked below.
      rejectUnauthorized: false,
      minVersion: 'TLSv1.3',
      ciphers: DATA_CHANNEL_CIPHERS,
      honorCipherOrder: true,
      ALPNProtocols: [...options.protocols],
      handshakeTimeout: options.handshakeTimeoutMs,
      allowHalfOpen: true
    })
    server.maxConnections = 1024
    // Raw connections too: one whose handshake never finished still holds the server open.
    const sockets = new Set<Socket>()
    // Handshakes are unauthenticated work: one address may not hold many of them open at once.
    const perAddress = new Map<string, number>()
    server.on('connection', (raw: Socket) => {
      const address = raw.remoteAddress ?? '?'
      const count = (perAddress.get(address) ?? 0) + 1
      if (count > MAX_CONNECTIONS_PER_ADDRESS) { raw.destroy(); return }
      perAddress.set(address, count)
      raw.once('close', () => { const left = (perAddress.get(address) ?? 1) - 1; if (left <= 0) perAddress.delete(address); else perAddress.set(address, left) })
      sockets.add(raw)
      raw.on('close', () => { sockets.delete(raw) })
    })
    server.on('tlsClientError', (err) => { options.log?.debug(`a handshake failed: ${err.message}`) })
    server.on('secureConnection', (socket) => {
      socket.on('error', () => {})
      sockets.add(socket)
      socket.on('close', () => { sockets.delete(socket) })
      void (async () => {
        const timer = setTimeout(() => socket.destroy(), options.handshakeTimeoutMs)
        try {
          const protocol = socket.alpnProtocol
          if (typeof protocol !== 'string' || !options.protocols.includes(protocol)) throw new Error(`unexpected protocol ${String(protocol)}`)
          const peer = (await authenticatedPeer(socket)).toString()
          if (options.allowPeer != null && !(await options.allowPeer(peer))) throw new Error(`peer ${peer} is not allowed`)
          clearTimeout(timer)
          options.accept(new SocketFrameChannel(socket, peer, { protocol, maxFrameBytes: options.maxFrameBytes, maxQueuedFrames: options.maxQueuedFrames }))
        } catch (err) {
          clearTimeout(timer)
          options.log?.debug(`refused a connection from ${socket.remoteAddress ?? '?'}: ${describeError(err)}`)
          socket.destroy()
        }
      })()
    })
    await listenOn(server, 'data channel', options.host, options.port, { reusePort: options.reusePort === true })
    return new DirectServer(server, sockets)
  }

  get port (): number {
    return (this.server.address() as AddressInfo).port
  }

  /** Stops listening and drops every open connection (the agent is leaving the swarm). */
  async close (): Promise<void> {
    const closed = new Promise<void>(resolve => { this.server.close(() => { resolve() }) })
    for (const socket of this.sockets) socket.destroy()
    await closed
  }
}
