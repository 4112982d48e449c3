import type { IncomingMessage } from 'node:http'
import { elementCount } from '../../schema.js'
import { RequestError } from './request-parsing.js'
import { MAX_GATHER_BYTES } from '../../matchmaking/group-info.js'
import { packedBytes, type StoredTensor } from './region-layout.js'
import { bytesOf, narrowThrough, widenThrough, type Scratch } from './region.js'

/** `application/vnd.avs.tensors`: u32le n + n bytes of control JSON + every tensor's bytes in registered order and dtype. */
export const TENSORS_CONTENT_TYPE = 'application/vnd.avs.tensors'
/** A control document carries weight, timeout and gather (≤ MAX_GATHER_BYTES) or a step summary with everyone's gather. */
export const MAX_CONTROL_BYTES = 4 * MAX_GATHER_BYTES + 4096

export function isTensorsBody (contentType: string | undefined): boolean {
  return contentType?.split(';')[0].trim().toLowerCase() === TENSORS_CONTENT_TYPE
}

interface Slot {
  readonly name: string
  readonly dtype: StoredTensor['dtype']
  /** Where the tensor's bytes start in the packed tensor section of the body. */
  readonly packedStart: number
  readonly packedBytes: number
  /** The tensor's float32 values in the staging buffer. */
  readonly values: Float32Array
  /**
   * Where its raw bytes land: float32 straight into `values`; 16-bit into the upper half of
   * `values`' bytes, widened in place once complete (element i is read before it is overwritten).
   */
  readonly raw: Uint8Array
}

function slots (schema: readonly StoredTensor[], staging: Float32Array): Slot[] {
  let packed = 0
  let element = 0
  return schema.map(t => {
    const count = elementCount(t.shape)
    const values = staging.subarray(element, element + count)
    const bytes = bytesOf(values)
    const size = t.dtype === 'float32' ? 4 : 2
    const slot = { name: t.name, dtype: t.dtype, packedStart: packed, packedBytes: count * size, values, raw: size === 4 ? bytes : bytes.subarray(2 * count) }
    packed += count * size
    element += count
    return slot
  })
}

/**
 * Streams a binary body into `staging` (the schema's float32 values, back to back), widening
 * 16-bit tensors as they complete, and returns the parsed control JSON. Never holds more than one
 * network chunk besides `staging`; a body of the wrong length is a 400 naming the expected size.
 */
export async function readTensorsBody (req: IncomingMessage, schema: readonly StoredTensor[], staging: Float32Array, scratch: Scratch): Promise<unknown> {
  const tensorBytes = packedBytes(schema)
  const targets = slots(schema, staging)
  const declared = Number(req.headers['content-length'])
  const head = Buffer.alloc(4)
  let control: Buffer | undefined
  let received = 0
  let controlLength = -1
  let next = 0 // the next slot to complete
  const wrongLength = (got: string): RequestError => new RequestError(400, `the binary body has ${got} bytes but this schema needs ${4 + controlLength + tensorBytes} (4 + ${controlLength} control bytes + ${tensorBytes} tensor bytes)`)

  const take = (chunk: Buffer): void => {
    let at = 0
    while (at < chunk.byteLength) {
      if (received < 4) {
        const n = Math.min(4 - received, chunk.byteLength - at)
        chunk.copy(head, received, at, at + n)
        received += n
        at += n
        if (received === 4) {
          controlLength = head.readUInt32LE(0)
          if (controlLength > MAX_CONTROL_BYTES) throw new RequestError(400, `the binary body's control JSON is ${controlLength} bytes, above the limit of ${MAX_CONTROL_BYTES}`)
          control = Buffer.alloc(controlLength)
          if (Number.isFinite(declared) && declared !== 4 + controlLength + tensorBytes) throw wrongLength(String(declared))
        }
        continue
      }
      const inControl = received - 4
      if (control !== undefined && inControl < controlLength) {
        const n = Math.min(controlLength - inControl, chunk.byteLength - at)
        chunk.copy(control, inControl, at, at + n)
        received += n
        at += n
        continue
      }
      const pos = received - 4 - controlLength
      if (pos >= tensorBytes) throw wrongLength(`more than ${received}`)
      const slot = targets[next]
      const within = pos - slot.packedStart
      const n = Math.min(slot.packedBytes - within, chunk.byteLength - at)
      chunk.copy(slot.raw, within, at, at + n)
      received += n
      at += n
      if (within + n === slot.packedBytes) {
        if (slot.dtype !== 'float32') widenThrough(scratch, slot.dtype, new Uint16Array(slot.raw.buffer, slot.raw.byteOffset, slot.values.length), slot.values)
        next++
      }
    }
  }

  // Events rather than for-await: leaving an async iterator early destroys the socket, and the trainer should read our 400.
  await new Promise<void>((resolve, reject) => {
    const onData = (chunk: Buffer): void => {
      try {
        take(chunk)
      } catch (err) {
        req.off('data', onData)
        req.resume()
        reject(err)
      }
    }
    req.on('data', onData)
    req.once('end', () => { resolve() })
    req.once('error', reject)
    req.once('close', () => { reject(new RequestError(400, 'the client closed the connection before sending the whole body')) })
  })
  if (controlLength < 0) throw new RequestError(400, `the binary body has ${received} bytes, too short for its 4-byte control length`)
  if (received !== 4 + controlLength + tensorBytes) throw wrongLength(String(received))
  try {
    return controlLength === 0 ? {} : JSON.parse((control ?? Buffer.alloc(0)).toString('utf8'))
  } catch {
    throw new RequestError(400, 'the binary body\'s control part is not valid JSON')
  }
}

/** u32le length + the JSON: the head of a binary answer. */
export function controlHead (body: unknown): Buffer {
  const json = Buffer.from(JSON.stringify(body))
  const head = Buffer.alloc(4 + json.byteLength)
  head.writeUInt32LE(json.byteLength, 0)
  json.copy(head, 4)
  return head
}

/**
 * Packs `tensors` in their storage dtypes back to back into `into` (the staging buffer's bytes,
 * which are always large enough: every stored item is at most 4 bytes) and returns that view.
 */
export function packTensors (schema: readonly StoredTensor[], tensors: readonly Float32Array[], into: Uint8Array, scratch: Scratch): Uint8Array {
  let at = 0
  schema.forEach((t, i) => {
    const src = tensors[i]
    if (t.dtype === 'float32') into.set(bytesOf(src), at)
    else narrowThrough(scratch, t.dtype, src, new Uint16Array(into.buffer, into.byteOffset + at, src.length))
    at += src.length * (t.dtype === 'float32' ? 4 : 2)
  })
  return into.subarray(0, at)
}
