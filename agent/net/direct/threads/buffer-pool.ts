/** Buffers are rounded up to this, so parts of one size (the common case) fit each other's buffers. */
const ROUNDING = 4096

/**
 * ArrayBuffers handed back for reuse, up to a byte budget. Buffers cross between threads by
 * transfer, so each side keeps the ones that came back rather than allocating (and zeroing, and
 * later collecting) a fresh one per frame.
 */
export class BufferPool {
  private readonly spare: ArrayBuffer[] = []
  private bytes = 0

  /** maxBytes: what the pool may hold; about the bytes a thread keeps in flight is enough. */
  constructor (private readonly maxBytes = 64 * 1024 * 1024) {}

  /** A buffer of at least `bytes` (at most about twice that), reused where one is spare. */
  take (bytes: number): ArrayBuffer {
    for (let i = this.spare.length - 1; i >= 0; i--) {
      const buf = this.spare[i]
      if (buf.byteLength >= bytes && buf.byteLength <= 2 * bytes + ROUNDING) {
        this.spare.splice(i, 1)
        this.bytes -= buf.byteLength
        return buf
      }
    }
    return new ArrayBuffer(Math.ceil(Math.max(bytes, 1) / ROUNDING) * ROUNDING)
  }

  give (buf: ArrayBuffer): void {
    if (this.bytes + buf.byteLength > this.maxBytes) return
    this.spare.push(buf)
    this.bytes += buf.byteLength
  }
}
