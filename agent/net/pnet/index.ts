/**
 * Our libp2p connection protector for private networks (`connectionProtector: privateNetwork({ psk })`).
 * Wire-compatible with @libp2p/pnet and go-libp2p's pnet: each side sends a random 24-byte nonce in
 * the clear, then everything each way is XORed with XSalsa20(psk, sender's nonce). A peer with
 * another key sees only noise, so the Noise/TLS handshake that follows fails and it never connects.
 * Why not @libp2p/pnet 3.0.27: see README.md in this folder.
 */
import { randomBytes } from 'node:crypto'
import { byteStream } from '@libp2p/utils'
import type { AbortOptions, ConnectionProtector, MessageStream, MultiaddrConnection } from '@libp2p/interface'
import { decodeSwarmKey } from './swarm-key.js'
import { ProtectedConnection } from './protected-connection.js'

export { decodeSwarmKey, encodeSwarmKey, newSwarmKeyText } from './swarm-key.js'
export { ProtectedConnection } from './protected-connection.js'

export const NONCE_LENGTH = 24

export interface PrivateNetworkInit {
  /** The swarm.key v1 file's bytes or text. */
  readonly psk: Uint8Array | string
  /** Milliseconds to wait for the remote nonce when libp2p passes no signal (default 5000). */
  readonly timeout?: number
  /** Called with each connection once protected. */
  readonly onConnection?: (connection: ProtectedConnection) => void
}

class PrivateNetworkProtector implements ConnectionProtector {
  readonly [Symbol.toStringTag] = 'averaging-swarm/pnet'

  constructor (private readonly key: Uint8Array, private readonly timeout: number, private readonly onConnection?: (connection: ProtectedConnection) => void) {}

  async protect (connection: MessageStream, options?: AbortOptions): Promise<MessageStream> {
    const inner = connection as MultiaddrConnection
    const log = inner.log.newScope('pnet')
    const localNonce = Uint8Array.from(randomBytes(NONCE_LENGTH))
    const signal = options?.signal ?? AbortSignal.timeout(this.timeout)
    const bytes = byteStream(inner)
    const [remote] = await Promise.all([
      bytes.read({ bytes: NONCE_LENGTH, signal }),
      bytes.write(localNonce, { signal })
    ])
    log('exchanged nonces')
    // unwrap() hands bytes read past the nonce back to the connection, so none are lost.
    const protectedConnection = new ProtectedConnection({ inner: bytes.unwrap() as MultiaddrConnection, key: this.key, localNonce, remoteNonce: remote.subarray(), log })
    this.onConnection?.(protectedConnection)
    return protectedConnection
  }
}

/** A connection-protector factory for createLibp2p; throws at once when the key file is malformed. */
export function privateNetwork (init: PrivateNetworkInit): () => ConnectionProtector {
  const key = decodeSwarmKey(init.psk)
  const timeout = init.timeout ?? 5000
  return () => new PrivateNetworkProtector(key, timeout, init.onConnection)
}
