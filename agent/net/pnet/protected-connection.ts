/**
 * A connection whose bytes are XORed with XSalsa20(psk, nonce) each way: our nonce for what we
 * send, the remote's for what we receive (the libp2p pnet spec; the same wire as @libp2p/pnet).
 */
import { AbstractMultiaddrConnection } from '@libp2p/utils'
import type { AbortOptions, Logger, MultiaddrConnection } from '@libp2p/interface'
import type { Uint8ArrayList } from 'uint8arraylist'
import { XSalsa20Keystream } from './keystream.js'

export interface ProtectedConnectionInit {
  readonly inner: MultiaddrConnection
  readonly key: Uint8Array
  readonly localNonce: Uint8Array
  readonly remoteNonce: Uint8Array
  readonly log: Logger
}

export class ProtectedConnection extends AbstractMultiaddrConnection {
  private readonly inner: MultiaddrConnection
  private readonly inbound: XSalsa20Keystream
  private readonly outbound: XSalsa20Keystream

  constructor (init: ProtectedConnectionInit) {
    super({ log: init.log, remoteAddr: init.inner.remoteAddr, direction: init.inner.direction })
    this.inner = init.inner
    this.inbound = new XSalsa20Keystream(init.key, init.remoteNonce)
    this.outbound = new XSalsa20Keystream(init.key, init.localNonce)
    this.inner.addEventListener('message', (evt) => {
      try {
        const data = evt.data
        if (data instanceof Uint8Array) this.onData(this.inbound.xor(data))
        else for (const chunk of data) this.onData(this.inbound.xor(chunk))
      } catch (err) {
        // A keystream that cannot go on must not hand on garbage: end the connection.
        this.abort(err as Error)
      }
    })
    this.inner.addEventListener('drain', () => { this.onMuxerDrain() })
    this.inner.addEventListener('close', (evt) => {
      if (evt.error == null) this.onTransportClosed()
      else if (evt.local === true) this.abort(evt.error)
      else this.onRemoteReset()
    })
  }

  /** Bytes that went through each keystream so far (for tests and logs). */
  get protectedBytes (): { sent: number, received: number } {
    return { sent: this.outbound.position, received: this.inbound.position }
  }

  sendData (data: Uint8ArrayList): { sentBytes: number, canSendMore: boolean } {
    // XOR chunk by chunk into one new buffer: the chunks may be the caller's own arrays.
    const out = new Uint8Array(data.byteLength)
    let offset = 0
    for (const chunk of data) {
      this.outbound.xor(chunk, out.subarray(offset, offset + chunk.byteLength))
      offset += chunk.byteLength
    }
    return { sentBytes: out.byteLength, canSendMore: this.inner.send(out) }
  }

  async sendClose (options?: AbortOptions): Promise<void> {
    await this.inner.close(options)
  }

  sendReset (err: Error): void {
    this.inner.abort(err)
  }

  sendPause (): void {
    this.inner.pause()
  }

  sendResume (): void {
    this.inner.resume()
  }
}
