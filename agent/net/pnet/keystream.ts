/**
 * One direction of a private-network connection: the XSalsa20 keystream for (key, nonce), XORed
 * over the bytes in the order they pass, however they are cut into chunks.
 *
 * The cipher is @noble/ciphers' audited, pure-JS xsalsa20, called with an explicit block counter.
 * It keeps no state between calls and shares nothing between instances, unlike the xsalsa20 npm
 * module behind @libp2p/pnet 3.0.27, whose instances share one WASM memory (see README.md here).
 */
import { xsalsa20 } from '@noble/ciphers/salsa.js'

const BLOCK = 64
/** noble refuses block counters at or above 2^32 - 1: 256 GiB per direction of one connection. */
export const MAX_BLOCKS = 2 ** 32 - 2
const ZERO_BLOCK = new Uint8Array(BLOCK)

export class XSalsa20Keystream {
  private readonly key: Uint8Array
  private readonly nonce: Uint8Array
  /** Keystream of the block before `counter`, of which `used` bytes are spent. */
  private readonly block = new Uint8Array(BLOCK)
  private used = BLOCK
  private counter: number

  constructor (key: Uint8Array, nonce: Uint8Array, startBlock = 0) {
    if (key.byteLength !== 32) throw new Error('An XSalsa20 key has 32 bytes.')
    if (nonce.byteLength !== 24) throw new Error('An XSalsa20 nonce has 24 bytes.')
    this.key = key.slice()
    this.nonce = nonce.slice()
    this.counter = startBlock
  }

  /** Bytes of keystream spent so far. */
  get position (): number {
    return this.counter * BLOCK - (BLOCK - this.used)
  }

  /** input XOR the next input.byteLength keystream bytes, written to output (a new array by default). */
  xor (input: Uint8Array, output: Uint8Array = new Uint8Array(input.byteLength)): Uint8Array {
    const n = input.byteLength
    if (output.byteLength < n) throw new Error('The output is shorter than the input.')
    let i = 0
    // First the rest of a block a previous call started.
    for (; i < n && this.used < BLOCK; i++) output[i] = input[i] ^ this.block[this.used++]
    const whole = (n - i) - ((n - i) % BLOCK)
    if (whole > 0) {
      this.reserve(whole / BLOCK)
      xsalsa20(this.key, this.nonce, input.subarray(i, i + whole), output.subarray(i, i + whole), this.counter)
      this.counter += whole / BLOCK
      i += whole
    }
    if (i < n) {
      this.reserve(1)
      xsalsa20(this.key, this.nonce, ZERO_BLOCK, this.block, this.counter)
      this.counter += 1
      this.used = 0
      for (; i < n; i++) output[i] = input[i] ^ this.block[this.used++]
    }
    return output
  }

  private reserve (blocks: number): void {
    if (this.counter + blocks > MAX_BLOCKS) {
      throw new Error('This private-network connection has used its whole keystream (256 GiB one way); it closes and the peers redial with fresh nonces.')
    }
  }
}
