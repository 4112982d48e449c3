import { createHash } from 'node:crypto'
import type { CompressionChoice } from './compression/index.js'
import { AveragingError } from './errors.js'

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

/**
 * The indices (in registered order) of the named tensors, or undefined when they are all of them
 * (an ordinary round). Throws AveragingError naming the problem: no names, an unknown or repeated one.
 */
export function subsetOf (tensors: readonly TensorSchema[], names: readonly string[]): number[] | undefined {
  if (!Array.isArray(names) || names.length === 0) throw new AveragingError('names must list at least one registered tensor')
  const index = new Map(tensors.map((t, i) => [t.name, i]))
  const seen = new Set<number>()
  for (const name of names) {
    const i = typeof name === 'string' ? index.get(name) : undefined
    if (i === undefined) throw new AveragingError(`names holds ${JSON.stringify(name)}, which is not a registered tensor`)
    if (seen.has(i)) throw new AveragingError(`names holds "${name}" twice`)
    seen.add(i)
  }
  return seen.size === tensors.length ? undefined : [...seen].sort((a, b) => a - b)
}

/**
 * A round over some of the registered tensors (`subset`: their indices, ascending) has its own
 * schema: the full schema's hash, and the subset's indices and names. Peers averaging one subset
 * never join peers averaging another, or all tensors (which keep schemaHash, unchanged).
 */
export function subsetSchemaHash (tensors: readonly TensorSchema[], subset: readonly number[], compression: CompressionChoice, partSizeBytes: number): Uint8Array {
  const full = Buffer.from(schemaHash(tensors, compression, partSizeBytes)).toString('hex')
  const canonical = JSON.stringify({ schema: full, subset: subset.map(i => [i, tensors[i].name]) })
  return new Uint8Array(createHash('sha256').update(canonical).digest())
}

/** The tag a subset's rounds add to the matchmaking prefix ("<prefix>.s<tag>"): the first 12 hex digits of its schema hash. */
export function subsetTag (hash: Uint8Array): string {
  return Buffer.from(hash.subarray(0, 6)).toString('hex')
}

export function elementCount (shape: readonly number[]): number {
  return shape.reduce((n, d) => n * d, 1)
}
