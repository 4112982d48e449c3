import { createHash } from 'node:crypto'
import type { CompressionChoice } from './compression/index.js'

export interface TensorSchema {
  readonly name: string
  readonly shape: readonly number[]
}

/**
 * Peers group only with peers whose tensors and wire settings match: the hash covers shapes,
 * dtype, compression and part size (which decide the partition), not devices or flags that
 * made hivemind refuse to pair a CPU peer with a GPU one.
 */
export function schemaHash (tensors: readonly TensorSchema[], compression: CompressionChoice, partSizeBytes: number): Uint8Array {
  const canonical = JSON.stringify({ dtype: 'float32', compression, partSizeBytes, shapes: tensors.map(t => t.shape) })
  return new Uint8Array(createHash('sha256').update(canonical).digest())
}

export function elementCount (shape: readonly number[]): number {
  return shape.reduce((n, d) => n * d, 1)
}
