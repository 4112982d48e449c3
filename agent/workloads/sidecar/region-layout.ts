import { elementCount } from '../../schema.js'
import { itemSize, type StorageDtype } from './dtypes.js'

/** What register declares per tensor: the averaged shape plus how the trainer stores it. */
export interface StoredTensor {
  readonly name: string
  readonly shape: readonly number[]
  readonly dtype: StorageDtype
}

export const REGION_MAGIC = 'AVSREGN1'
export const HEADER_BYTES = 64
export const SEQ_OFFSET = 8
export const GENERATION_OFFSET = 16
/** Tensors start on 64-byte boundaries: cache lines, and any numpy/torch view of them is aligned. */
export const ALIGN = 64

export interface TensorPlacement {
  readonly name: string
  readonly dtype: StorageDtype
  readonly offset: number
  readonly bytes: number
}

export interface RegionLayout {
  readonly bytes: number
  readonly offsets: readonly TensorPlacement[]
}

const alignUp = (n: number): number => Math.ceil(n / ALIGN) * ALIGN

/** docs/trainer-api.md's rule, which the clients compute too: 64-byte header, then each tensor 64-aligned. */
export function regionLayout (schema: readonly StoredTensor[]): RegionLayout {
  let at = HEADER_BYTES
  const offsets = schema.map(t => {
    const offset = alignUp(at)
    const bytes = elementCount(t.shape) * itemSize(t.dtype)
    at = offset + bytes
    return { name: t.name, dtype: t.dtype, offset, bytes }
  })
  return { bytes: alignUp(at), offsets }
}

/** Bytes of every tensor in its storage dtype, back to back: the tensor part of a binary body. */
export function packedBytes (schema: readonly StoredTensor[]): number {
  return schema.reduce((n, t) => n + elementCount(t.shape) * itemSize(t.dtype), 0)
}
