import type { TLSSocket } from 'node:tls'
import { createHash } from 'node:crypto'
import { peerIdFromString } from '@libp2p/peer-id'
import { generateCertificate, verifyPeerCertificate } from '@libp2p/tls/utils'
import type { PeerId, PrivateKey } from '@libp2p/interface'
import { ProtocolError, describeError } from '../../errors.js'

/** The certificate a peer presents on the direct data channel: an ephemeral key whose SPKI is signed by the libp2p identity key. */
export interface DataChannelIdentity {
  readonly cert: string
  readonly key: string
}

/**
 * Binds a fresh TLS key to our libp2p identity exactly as the libp2p TLS spec does (the signed
 * public-key extension), so the data channel authenticates the same peer ids as libp2p itself.
 */
export async function createDataChannelIdentity (privateKey: PrivateKey): Promise<DataChannelIdentity> {
  return await generateCertificate(privateKey)
}

/**
 * TLS 1.3 suites of the data channel, AES-128-GCM first (OpenSSL and node list AES-256-GCM first).
 * Every byte of a round is encrypted once and decrypted once, on cores the round shares with the
 * all-reduce: moving 2 GiB through node:tls took 2.86-2.97 CPU s with AES-128-GCM against 3.10-3.16
 * with AES-256-GCM here (openssl speed: 5.3 against 4.5 GB/s). AES-128-GCM is TLS 1.3's mandatory
 * suite and keeps 128-bit security; a peer that prefers another one still connects (the server's
 * order decides, honorCipherOrder).
 */
export const DATA_CHANNEL_CIPHERS = 'TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256'

/** Certificates already proven to carry a peer id, by SHA-256 of their DER bytes (oldest dropped first). */
const verified = new Map<string, Promise<string>>()
const MAX_VERIFIED = 4096

/**
 * The libp2p peer id the remote side of a finished TLS handshake proved it holds. TLS itself
 * checked the remote owns the certificate's key; this checks the key is signed by the peer id.
 */
export async function authenticatedPeer (socket: TLSSocket, expected?: PeerId): Promise<PeerId> {
  const raw = socket.getPeerCertificate(true)?.raw
  if (raw == null || raw.byteLength === 0) throw new ProtocolError('the remote side presented no certificate')
  // A peer keeps one certificate for its life: parsing and checking it (~15 ms of CPU) once is
  // enough, since TLS proves possession of the certificate's key on every handshake.
  const digest = createHash('sha256').update(raw).digest('hex')
  let peer = verified.get(digest)
  if (peer == null) {
    if (verified.size >= MAX_VERIFIED) verified.delete(verified.keys().next().value as string)
    peer = verifyPeerCertificate(new Uint8Array(raw)).then(id => id.toString())
    verified.set(digest, peer)
    peer.catch(() => { verified.delete(digest) })
  }
  try {
    const id = await peer
    if (expected != null && id !== expected.toString()) throw new ProtocolError(`the remote side is not peer ${expected.toString()}`)
    return peerIdFromString(id)
  } catch (err) {
    if (err instanceof ProtocolError) throw err
    throw new ProtocolError(`the remote certificate does not prove a libp2p identity: ${describeError(err)}`)
  }
}

/**
 * The direct data channel's identity as a libp2p service (`services: { dataIdentity: dataChannelIdentity() }`):
 * libp2p hands services the node's identity key, which the node itself does not expose.
 */
export class DataChannelIdentities {
  readonly [Symbol.toStringTag] = 'averaging-swarm/data-channel-identity'
  private made?: Promise<DataChannelIdentity>

  constructor (private readonly components: { readonly privateKey: PrivateKey }) {}

  /**
   * Made as the node starts, while it dials its bootstrap peers: the averager's listener and the
   * state download each made their own when they first needed it (13-17 ms each in a fresh
   * process), both on a restarted agent's way back into rounds.
   */
  start (): void {
    void this.create().catch(() => {})
  }

  /** libp2p starts only services that stop as well; the certificate lives as long as the process. */
  stop (): void {}

  /** The node's certificate (createDataChannelIdentity), made once: the averager and state sharing present the same one. */
  async create (): Promise<DataChannelIdentity> {
    const made = this.made ??= createDataChannelIdentity(this.components.privateKey)
    // A failure is not kept: the next caller tries again.
    made.catch(() => { if (this.made === made) this.made = undefined })
    return await made
  }
}

export function dataChannelIdentity (): (components: { readonly privateKey: PrivateKey }) => DataChannelIdentities {
  return (components) => new DataChannelIdentities(components)
}
