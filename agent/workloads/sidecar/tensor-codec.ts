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

/**
 * Decodes base64 into a fresh, aligned Float32Array; undefined when the text is not valid base64
 * of whole floats. Node's decoder skips characters outside the alphabet, so any such character
 * shows as fewer bytes than the text's length promises: no regex over megabytes needed.
 */
export function decodeFloat32 (text: string): Float32Array | undefined {
  if (text.length % 4 !== 0) return undefined
  const padding = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0
  const bytes = Buffer.from(text, 'base64')
  if (bytes.byteLength !== (text.length / 4) * 3 - padding || bytes.byteLength % 4 !== 0) return undefined
  const out = new Float32Array(bytes.byteLength / 4)
  new Uint8Array(out.buffer).set(bytes)
  return out
}

/** Index of the first NaN or infinity, or -1: a plain loop, several times faster than findIndex on millions of values. */
export function firstNonFinite (data: Float32Array): number {
  for (let i = 0; i < data.length; i++) {
    const v = data[i]
    if (v - v !== 0) return i
  }
  return -1
}

/**
 * A JSON object with a "tensors" member mapping names to base64, as string chunks. JSON.stringify
 * scans every character of a string for escapes, ~0.5 s for 16 MiB of floats; base64 needs none,
 * so the big strings are spliced in as they are.
 */
export function jsonWithTensors (body: Record<string, unknown>, tensors: ReadonlyArray<readonly [string, Float32Array]>): string[] {
  const head = JSON.stringify(body)
  const chunks = [head.slice(0, -1), head.length > 2 ? ',"tensors":{' : '"tensors":{']
  tensors.forEach(([name, data], i) => { chunks.push(`${i > 0 ? ',' : ''}${JSON.stringify(name)}:"`, encodeFloat32(data), '"') })
  chunks.push('}}')
  return chunks
}

/** Base64 characters for n float32 values. */
export function base64Length (elements: number): number {
  return 4 * Math.ceil((elements * 4) / 3)
}
