import { endianness } from 'node:os'

/**
 * Tensors cross the sidecar API as base64 of little-endian float32, the layout numpy's '<f4' and
 * torch's CPU tensors have on every platform the agent ships for. Float32Array uses the host's
 * byte order, so a big-endian host would need a swap: refuse it loudly instead of corrupting.
 */
if (endianness() !== 'LE') throw new Error('the sidecar API needs a little-endian host')

export function encodeFloat32 (data: Float32Array): string {
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('base64')
}

/** Decodes base64 into a fresh, aligned Float32Array; undefined when the text is not valid base64 of whole floats. */
export function decodeFloat32 (text: string): Float32Array | undefined {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 !== 0) return undefined
  const bytes = Buffer.from(text, 'base64')
  if (bytes.byteLength % 4 !== 0) return undefined
  const out = new Float32Array(bytes.byteLength / 4)
  new Uint8Array(out.buffer).set(bytes)
  return out
}

/** Base64 characters for n float32 values. */
export function base64Length (elements: number): number {
  return 4 * Math.ceil((elements * 4) / 3)
}
