/**
 * The libp2p private-network key file ("swarm.key", v1), as go-ipfs, go-libp2p and @libp2p/pnet
 * read it:
 *
 *   /key/swarm/psk/1.0.0/
 *   /base16/
 *   <64 hex digits: 32 bytes>
 */
import { randomBytes } from 'node:crypto'

export const SWARM_KEY_HEADER = '/key/swarm/psk/1.0.0/'
export const SWARM_KEY_LENGTH = 32

/** A new swarm.key v1 text with 32 random bytes, ending in a newline. */
export function newSwarmKeyText (): string {
  return encodeSwarmKey(randomBytes(SWARM_KEY_LENGTH))
}

export function encodeSwarmKey (key: Uint8Array): string {
  if (key.byteLength !== SWARM_KEY_LENGTH) throw new Error(`A swarm key has ${SWARM_KEY_LENGTH} bytes, not ${key.byteLength}.`)
  return `${SWARM_KEY_HEADER}\n/base16/\n${Buffer.from(key).toString('hex')}\n`
}

/** The 32 key bytes of a swarm.key v1 file; throws one readable sentence when the file is not one. */
export function decodeSwarmKey (file: Uint8Array | string): Uint8Array {
  const text = typeof file === 'string' ? file : Buffer.from(file).toString('utf8')
  const [header, codec, body] = text.trim().split(/\r\n|\r|\n/).map(line => line.trim())
  if (header !== SWARM_KEY_HEADER) throw new Error(`The private-network key does not start with ${SWARM_KEY_HEADER} (not a swarm.key v1 file).`)
  if (codec !== '/base16/') throw new Error(`The private-network key's encoding is "${codec ?? ''}"; only /base16/ is supported.`)
  if (body === undefined || !/^[0-9a-fA-F]{64}$/.test(body)) throw new Error(`The private-network key must be ${SWARM_KEY_LENGTH * 2} hex digits (${SWARM_KEY_LENGTH} bytes).`)
  return Uint8Array.from(Buffer.from(body, 'hex'))
}
