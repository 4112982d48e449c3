import { BufferPool } from './direct/threads/buffer-pool.js'

/**
 * Memory for the bulk of the all-reduce's bytes on this thread: frames read in place off the
 * direct channel's sockets, and parts and means encoded for the wire. Each is lent out and comes
 * back once its last user is done (a reader releases a frame; a socket reports a write flushed), so a
 * round's tens of megabytes reuse a few instead of allocating fresh ArrayBuffers. Fresh ones are not
 * free: node zeroes them and V8 counts them as external memory, whose growth forces full collections
 * (27–57 mark-compacts a peer in 9 rounds before frames were read in place; BENCHMARKS.md).
 * Memory that never comes back (a write that failed, a transport that cannot say when it is done)
 * is simply collected.
 */
const pool = new BufferPool(32 * 1024 * 1024)
/** Buffers lent and not yet back: only they are taken back, and only once. */
const lent = new WeakSet<ArrayBuffer>()

/** Below this, memory of its own: V8 keeps small arrays on its heap, where they cost little. */
export const POOLED_BYTES = 4096

/** `bytes` of memory (contents undefined), at offset 0 of its buffer: aligned for any typed array. */
export function lendWireMemory (bytes: number): Uint8Array {
  if (bytes < POOLED_BYTES) return new Uint8Array(bytes)
  const buffer = pool.take(bytes)
  lent.add(buffer)
  return new Uint8Array(buffer, 0, bytes)
}

/**
 * Gives back the memory under `view` once nothing reads or writes it any more. Memory that was not
 * lent here, or was already given back, is left alone, so a caller never has to know which it holds.
 */
export function returnWireMemory (view: ArrayBufferView): void {
  const buffer = view.buffer
  if (buffer instanceof ArrayBuffer && lent.delete(buffer)) pool.give(buffer)
}
