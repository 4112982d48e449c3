import type { Uint8ArrayList } from 'uint8arraylist'
import { type Codec, CodecError, checkCount, checkLength, readFloat32s } from './types.js'

/**
 * 'none': raw little-endian float32 bytes, 4 bytes per value.
 * encode() is zero-copy: it returns a Uint8Array view on the input's own memory, so a caller that mutates the
 * input afterwards also changes the encoded bytes. decode() always copies (wire bytes may be unaligned); decodeInto() and decodePiecesInto() copy into the caller's buffer.
 */
export const noneCodec: Codec = Object.freeze({
  name: 'none',
  bytesPerElement: 4,
  encodedLength (n: number): number {
    checkCount('none', n)
    return 4 * n
  },
  encode (values: Float32Array): Uint8Array {
    return new Uint8Array(values.buffer, values.byteOffset, values.byteLength)
  },
  decode (bytes: Uint8Array, n: number): Float32Array {
    checkCount('none', n)
    checkLength('none', bytes, n, 4 * n)
    return readFloat32s(bytes, 0, n)
  },
  decodeInto (bytes: Uint8Array, n: number, out: Float32Array): Float32Array {
    checkCount('none', n)
    checkLength('none', bytes, n, 4 * n)
    const view = out.subarray(0, n)
    new Uint8Array(view.buffer, view.byteOffset, 4 * n).set(bytes)
    return view
  },
  decodePiecesInto (pieces: Uint8ArrayList, n: number, out: Float32Array): Float32Array {
    checkCount('none', n)
    if (pieces.byteLength !== 4 * n) throw new CodecError(`none codec: ${n} values need ${4 * n} encoded bytes, got ${pieces.byteLength}.`)
    const view = out.subarray(0, n)
    const target = new Uint8Array(view.buffer, view.byteOffset, 4 * n)
    let offset = 0
    for (const chunk of pieces) {
      target.set(chunk, offset)
      offset += chunk.byteLength
    }
    return view
  }
})
