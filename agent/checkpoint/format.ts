/**
 * The safetensors format (https://github.com/huggingface/safetensors): an 8-byte little-endian header
 * length N, N bytes of JSON `{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}`
 * (we pad it with spaces to a multiple of 8), then the tensors' raw little-endian bytes, offsets relative
 * to the end of the header. Only the three dtypes the sidecar stores are accepted: F32, F16, BF16.
 *
 * Everything read from a file is bounded before anything is allocated: the header length against
 * MAX_HEADER_BYTES and the file size, every offset against the data length, every shape against its
 * byte range; the data ranges must tile the data exactly (sorted, contiguous, no gap, no overlap), as
 * the Rust reader requires too. Errors are one sentence, as a SafetensorsError.
 */
import type { StorageDtype } from '../workloads/sidecar/dtypes.js'

export class SafetensorsError extends Error {
  override readonly name = 'SafetensorsError'
}

/** The Rust implementation's own limit (MAX_HEADER_SIZE = 100_000_000). */
export const MAX_HEADER_BYTES = 100_000_000
export const METADATA_KEY = '__metadata__'

export type SafetensorsDtype = 'F32' | 'F16' | 'BF16'
const DTYPE_SIZE: Record<SafetensorsDtype, number> = { F32: 4, F16: 2, BF16: 2 }
const TO_STORAGE: Record<SafetensorsDtype, StorageDtype> = { F32: 'float32', F16: 'float16', BF16: 'bfloat16' }
const FROM_STORAGE: Record<StorageDtype, SafetensorsDtype> = { float32: 'F32', float16: 'F16', bfloat16: 'BF16' }

export function toStorageDtype (dtype: SafetensorsDtype): StorageDtype { return TO_STORAGE[dtype] }
export function fromStorageDtype (dtype: StorageDtype): SafetensorsDtype { return FROM_STORAGE[dtype] }
function isSafetensorsDtype (v: unknown): v is SafetensorsDtype {
  return v === 'F32' || v === 'F16' || v === 'BF16'
}

export interface TensorEntry {
  readonly name: string
  readonly dtype: SafetensorsDtype
  readonly shape: readonly number[]
  /** Byte offsets relative to the start of the data section (after the 8 + N header bytes). */
  readonly begin: number
  readonly end: number
}

export interface Header {
  /** In file order (sorted by offset). */
  readonly tensors: readonly TensorEntry[]
  readonly metadata: Readonly<Record<string, string>>
  /** 8 + N: where the data section starts in the file. */
  readonly dataStart: number
}

export interface TensorLayout { readonly name: string, readonly dtype: SafetensorsDtype, readonly shape: readonly number[] }

/**
 * The header bytes (8-byte length + padded JSON) for tensors laid out in the given order, contiguously,
 * and the data section's length. Names must be unique, non-empty and not `__metadata__`.
 */
export function encodeHeader (tensors: readonly TensorLayout[], metadata: Readonly<Record<string, string>> = {}): { bytes: Uint8Array, entries: TensorEntry[], dataBytes: number } {
  const json: Record<string, unknown> = {}
  const meta: Record<string, string> = {}
  for (const [k, v] of Object.entries(metadata)) {
    if (typeof v !== 'string') throw new SafetensorsError(`Metadata value of "${k}" is not a string.`)
    meta[k] = v
  }
  if (Object.keys(meta).length > 0) json[METADATA_KEY] = meta
  const entries: TensorEntry[] = []
  const seen = new Set<string>()
  let offset = 0
  for (const t of tensors) {
    if (typeof t.name !== 'string' || t.name === '' || t.name === METADATA_KEY) throw new SafetensorsError(`Tensor name ${JSON.stringify(t.name)} is not allowed.`)
    if (seen.has(t.name)) throw new SafetensorsError(`Tensor name "${t.name}" appears twice.`)
    seen.add(t.name)
    if (!isSafetensorsDtype(t.dtype)) throw new SafetensorsError(`Tensor "${t.name}" has unsupported dtype ${JSON.stringify(t.dtype)}.`)
    const bytes = checkedByteLength(t.name, t.shape, t.dtype, Number.MAX_SAFE_INTEGER)
    const entry: TensorEntry = { name: t.name, dtype: t.dtype, shape: [...t.shape], begin: offset, end: offset + bytes }
    entries.push(entry)
    json[t.name] = { dtype: t.dtype, shape: entry.shape, data_offsets: [entry.begin, entry.end] }
    offset += bytes
    if (!Number.isSafeInteger(offset)) throw new SafetensorsError('The tensors are too large for one file.')
  }
  const body = new TextEncoder().encode(JSON.stringify(json))
  const padded = Math.ceil(body.length / 8) * 8
  if (padded > MAX_HEADER_BYTES) throw new SafetensorsError(`The header would be ${padded} bytes, more than ${MAX_HEADER_BYTES}.`)
  const bytes = new Uint8Array(8 + padded).fill(0x20)
  new DataView(bytes.buffer).setBigUint64(0, BigInt(padded), true)
  bytes.set(body, 8)
  return { bytes, entries, dataBytes: offset }
}

/**
 * Reads the header length from a file's first 8 bytes and bounds it: by MAX_HEADER_BYTES and by the
 * file's size. Returns N (the JSON's byte length); nothing is allocated here.
 */
export function parseHeaderLength (first8: Uint8Array, fileBytes: number): number {
  if (fileBytes < 8 || first8.length < 8) throw new SafetensorsError(`The file is ${fileBytes} bytes, too short for the 8-byte header length.`)
  const n = new DataView(first8.buffer, first8.byteOffset, 8).getBigUint64(0, true)
  if (n > BigInt(MAX_HEADER_BYTES)) throw new SafetensorsError(`The header length ${n} exceeds the limit of ${MAX_HEADER_BYTES} bytes.`)
  if (n < 2n) throw new SafetensorsError(`The header length ${n} is too short for a JSON object.`)
  if (n > BigInt(fileBytes - 8)) throw new SafetensorsError(`The header length ${n} runs past the end of the ${fileBytes}-byte file.`)
  return Number(n)
}

/** Parses and validates the JSON header (bytes after the 8-byte length) against the file's data length. */
export function parseHeader (json: Uint8Array, dataBytes: number): Header {
  let text: string
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(json)
  } catch {
    throw new SafetensorsError('The header is not valid UTF-8.')
  }
  if (!text.startsWith('{')) throw new SafetensorsError('The header does not start with a JSON object.')
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    throw new SafetensorsError('The header is not valid JSON.')
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new SafetensorsError('The header is not a JSON object.')
  const metadata: Record<string, string> = {}
  const tensors: TensorEntry[] = []
  for (const [name, raw] of Object.entries(parsed as Record<string, unknown>)) {
    if (name === METADATA_KEY) {
      if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new SafetensorsError('The header\'s __metadata__ is not an object.')
      for (const [k, v] of Object.entries(raw as Record<string, unknown>)) {
        if (typeof v !== 'string') throw new SafetensorsError(`Metadata value of "${k}" is not a string.`)
        metadata[k] = v
      }
      continue
    }
    if (name === '') throw new SafetensorsError('A tensor has an empty name.')
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new SafetensorsError(`Tensor "${name}" is not described by an object.`)
    const { dtype, shape, data_offsets: offsets } = raw as Record<string, unknown>
    if (!isSafetensorsDtype(dtype)) throw new SafetensorsError(`Tensor "${name}" has unsupported dtype ${JSON.stringify(dtype)} (F32, F16 and BF16 are read).`)
    if (!Array.isArray(shape) || shape.length > 64 || !shape.every(d => Number.isSafeInteger(d) && d >= 0)) {
      throw new SafetensorsError(`Tensor "${name}" has an invalid shape.`)
    }
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every(o => Number.isSafeInteger(o) && o >= 0)) {
      throw new SafetensorsError(`Tensor "${name}" has invalid data_offsets.`)
    }
    const [begin, end] = offsets as [number, number]
    if (begin > end) throw new SafetensorsError(`Tensor "${name}" has data_offsets [${begin}, ${end}] that end before they begin.`)
    if (end > dataBytes) throw new SafetensorsError(`Tensor "${name}" has data_offsets ending at ${end}, past the ${dataBytes} bytes of data.`)
    const bytes = checkedByteLength(name, shape as number[], dtype, dataBytes)
    if (bytes !== end - begin) throw new SafetensorsError(`Tensor "${name}" has shape [${(shape as number[]).join(', ')}] of ${bytes} bytes but data_offsets span ${end - begin}.`)
    tensors.push({ name, dtype, shape: shape as number[], begin, end })
  }
  tensors.sort((a, b) => a.begin - b.begin || a.end - b.end)
  let at = 0
  for (const t of tensors) {
    if (t.begin < at) throw new SafetensorsError(`Tensor "${t.name}" overlaps the tensor before it.`)
    if (t.begin > at) throw new SafetensorsError(`The data has a gap before tensor "${t.name}".`)
    at = t.end
  }
  if (at !== dataBytes) throw new SafetensorsError(`The tensors cover ${at} bytes but the file has ${dataBytes} bytes of data.`)
  return { tensors, metadata, dataStart: 8 + json.length }
}

/** Bytes of a tensor, computed without overflow: every partial product is bounded by `limit`. */
function checkedByteLength (name: string, shape: readonly number[], dtype: SafetensorsDtype, limit: number): number {
  if (!Array.isArray(shape) || !shape.every(d => Number.isSafeInteger(d) && d >= 0)) throw new SafetensorsError(`Tensor "${name}" has an invalid shape.`)
  if (shape.includes(0)) return 0
  let bytes = DTYPE_SIZE[dtype]
  for (const d of shape) {
    bytes *= d
    if (bytes > limit) throw new SafetensorsError(`Tensor "${name}" has shape [${shape.join(', ')}], larger than the ${limit} bytes available.`)
  }
  return bytes
}
