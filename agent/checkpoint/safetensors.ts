/**
 * Streaming safetensors writer and bounded reader over a file handle. The writer never copies a whole
 * tensor: float32 data is written straight from the caller's Float32Array (in slices), 16-bit dtypes
 * are narrowed through one bounded scratch buffer. Each tensor's sha256 (of its stored bytes) is
 * computed on the way, so a checkpoint's manifest costs no second pass.
 */
import { createHash } from 'node:crypto'
import { endianness } from 'node:os'
import { open, type FileHandle } from 'node:fs/promises'
import { narrow, widen, type StorageDtype } from '../workloads/sidecar/dtypes.js'
import { elementCount } from '../schema.js'
import { sha256Hex } from './sha256-off-thread.js'
import { SafetensorsError, encodeHeader, fromStorageDtype, parseHeader, parseHeaderLength, toStorageDtype, type Header, type TensorEntry } from './format.js'

if (endianness() !== 'LE') throw new Error('The checkpoint code assumes a little-endian machine.')

/** Bytes written per write() call from a float32 view; also the largest read. */
const SLICE_BYTES = 16 << 20
/** 16-bit values narrowed (or widened) per step: the scratch buffer is 2 bytes × this. */
const SCRATCH_ELEMENTS = 1 << 20

export interface TensorSource {
  readonly name: string
  readonly dtype: StorageDtype
  readonly shape: readonly number[]
  /** The values as float32 (narrowed to `dtype` on write), or, for a 16-bit dtype, the stored bits. */
  readonly data: Float32Array | Uint16Array
}

export interface WriteResult {
  readonly bytes: number
  readonly headerBytes: number
  /** Hex sha256 of each tensor's stored bytes, in the order given. */
  readonly sha256: string[]
}

async function writeAll (fh: FileHandle, bytes: Uint8Array, position: number): Promise<void> {
  let done = 0
  while (done < bytes.length) {
    const { bytesWritten } = await fh.write(bytes, done, bytes.length - done, position + done)
    if (bytesWritten <= 0) throw new SafetensorsError('A write to the file made no progress.')
    done += bytesWritten
  }
}

async function readAll (fh: FileHandle, into: Uint8Array, position: number): Promise<void> {
  let done = 0
  while (done < into.length) {
    const { bytesRead } = await fh.read(into, done, into.length - done, position + done)
    if (bytesRead === 0) throw new SafetensorsError(`The file ended at ${position + done} bytes, before the data it declares.`)
    done += bytesRead
  }
}

/** Writes a complete safetensors file at position 0 of `fh` (which should be empty); does not sync. */
export async function writeSafetensors (fh: FileHandle, tensors: readonly TensorSource[], metadata: Readonly<Record<string, string>> = {}): Promise<WriteResult> {
  for (const t of tensors) {
    const n = elementCount(t.shape)
    if (t.data.length !== n) throw new SafetensorsError(`Tensor "${t.name}" has ${t.data.length} values for shape [${t.shape.join(', ')}] of ${n}.`)
    if (t.data instanceof Uint16Array ? t.dtype === 'float32' : !(t.data instanceof Float32Array)) {
      throw new SafetensorsError(`Tensor "${t.name}" must be given as a Float32Array${t.dtype === 'float32' ? '' : ' or a Uint16Array of stored bits'}.`)
    }
  }
  const { bytes: header, entries } = encodeHeader(tensors.map(t => ({ name: t.name, dtype: fromStorageDtype(t.dtype), shape: t.shape })), metadata)
  await writeAll(fh, header, 0)
  let position = header.length
  const sha256: string[] = []
  let scratch: Uint16Array | undefined
  for (let i = 0; i < tensors.length; i++) {
    const t = tensors[i]
    const hash = createHash('sha256')
    let offThread: string | undefined
    const put = async (chunk: Uint8Array): Promise<void> => {
      hash.update(chunk)
      await writeAll(fh, chunk, position)
      position += chunk.length
    }
    if (t.dtype !== 'float32' && t.data instanceof Float32Array) {
      scratch ??= new Uint16Array(SCRATCH_ELEMENTS)
      for (let at = 0; at < t.data.length; at += SCRATCH_ELEMENTS) {
        const part = scratch.subarray(0, Math.min(SCRATCH_ELEMENTS, t.data.length - at))
        narrow(t.dtype, t.data, at, part)
        await put(new Uint8Array(part.buffer, part.byteOffset, part.byteLength))
      }
    } else if (t.data.buffer instanceof SharedArrayBuffer) {
      // A snapshot copy: hashed in the worker while this thread only writes it.
      const all = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength)
      const hashing = sha256Hex(all)
      hashing.catch(() => {})
      for (let at = 0; at < all.length; at += SLICE_BYTES) {
        const chunk = all.subarray(at, Math.min(all.length, at + SLICE_BYTES))
        await writeAll(fh, chunk, position)
        position += chunk.length
      }
      offThread = await hashing
    } else {
      const all = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength)
      for (let at = 0; at < all.length; at += SLICE_BYTES) await put(all.subarray(at, Math.min(all.length, at + SLICE_BYTES)))
    }
    if (position !== header.length + entries[i].end) throw new SafetensorsError(`Tensor "${t.name}" wrote ${position} bytes where ${header.length + entries[i].end} were due.`)
    sha256.push(offThread ?? hash.digest('hex'))
  }
  return { bytes: position, headerBytes: header.length, sha256 }
}

/** An open safetensors file whose header has been read and validated. */
export class SafetensorsReader {
  private constructor (readonly fh: FileHandle, readonly header: Header, readonly fileBytes: number) {}

  static async open (path: string): Promise<SafetensorsReader> {
    const fh = await open(path, 'r')
    try {
      const { size } = await fh.stat()
      const first8 = new Uint8Array(8)
      if (size >= 8) await readAll(fh, first8, 0)
      const n = parseHeaderLength(first8, size)
      const json = new Uint8Array(n)
      await readAll(fh, json, 8)
      return new SafetensorsReader(fh, parseHeader(json, size - 8 - n), size)
    } catch (err) {
      await fh.close()
      throw err
    }
  }

  get metadata (): Readonly<Record<string, string>> { return this.header.metadata }
  get tensors (): readonly TensorEntry[] { return this.header.tensors }

  entry (name: string): TensorEntry {
    const e = this.header.tensors.find(t => t.name === name)
    if (e === undefined) throw new SafetensorsError(`The file has no tensor "${name}".`)
    return e
  }

  /** The tensor's stored bytes, as they are in the file. */
  async readRaw (name: string): Promise<Uint8Array> {
    const e = this.entry(name)
    const out = new Uint8Array(e.end - e.begin)
    await readAll(this.fh, out, this.header.dataStart + e.begin)
    return out
  }

  /** The tensor as float32 (16-bit dtypes widened exactly) and the sha256 of its stored bytes; one pass. */
  async readFloat32 (name: string): Promise<{ values: Float32Array, sha256: string }> {
    const e = this.entry(name)
    const count = (e.end - e.begin) / (e.dtype === 'F32' ? 4 : 2)
    const values = new Float32Array(count)
    const hash = createHash('sha256')
    const start = this.header.dataStart + e.begin
    if (e.dtype === 'F32') {
      const all = new Uint8Array(values.buffer)
      for (let at = 0; at < all.length; at += SLICE_BYTES) {
        const part = all.subarray(at, Math.min(all.length, at + SLICE_BYTES))
        await readAll(this.fh, part, start + at)
        hash.update(part)
      }
    } else {
      const scratch = new Uint16Array(Math.min(SCRATCH_ELEMENTS, count))
      const dtype = toStorageDtype(e.dtype) as 'float16' | 'bfloat16'
      for (let at = 0; at < count; at += SCRATCH_ELEMENTS) {
        const part = scratch.subarray(0, Math.min(SCRATCH_ELEMENTS, count - at))
        const bytes = new Uint8Array(part.buffer, 0, part.byteLength)
        await readAll(this.fh, bytes, start + at * 2)
        hash.update(bytes)
        widen(dtype, part, values, at)
      }
    }
    return { values, sha256: hash.digest('hex') }
  }

  /** sha256 of the tensor's stored bytes, read in bounded slices; nothing the tensor's size is allocated. */
  async sha256 (name: string, scratch = new Uint8Array(SLICE_BYTES)): Promise<string> {
    const e = this.entry(name)
    const hash = createHash('sha256')
    for (let at = e.begin; at < e.end; at += scratch.length) {
      const part = scratch.subarray(0, Math.min(scratch.length, e.end - at))
      await readAll(this.fh, part, this.header.dataStart + at)
      hash.update(part)
    }
    return hash.digest('hex')
  }

  async close (): Promise<void> { await this.fh.close() }
}
