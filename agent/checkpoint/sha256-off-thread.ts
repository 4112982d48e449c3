/**
 * sha256 off the main thread. At 250M float32 a checkpoint's hashing took ~3 CPU seconds on the
 * agent's event loop, where the round waited for it (BENCHMARKS.md, "Checkpoints and round time");
 * the write itself is async I/O. A snapshot copied into a SharedArrayBuffer is hashed here by one
 * worker while the main thread writes it. Bytes in an ordinary ArrayBuffer (a model held in place)
 * are hashed on the caller's thread, since handing them to a worker would mean copying them.
 */
import { createHash } from 'node:crypto'
import { Worker } from 'node:worker_threads'

let worker: Worker | undefined
let nextId = 0
const pending = new Map<number, { resolve: (hex: string) => void, reject: (err: Error) => void }>()

function hasher (): Worker {
  if (worker !== undefined) return worker
  const w = new Worker(new URL('./sha256-worker.js', import.meta.url))
  w.on('message', (m: { id: number, hex?: string, error?: string }) => {
    const p = pending.get(m.id)
    pending.delete(m.id)
    if (pending.size === 0) w.unref()
    if (m.hex !== undefined) p?.resolve(m.hex)
    else p?.reject(new Error(`hashing failed: ${m.error ?? 'no answer'}`))
  })
  // A dead worker fails what it held; the next digest starts a new one.
  const fail = (err: Error): void => {
    for (const p of pending.values()) p.reject(err)
    pending.clear()
    if (worker === w) worker = undefined
  }
  w.on('error', fail)
  w.on('exit', (code) => { fail(new Error(`the hashing thread exited (${code})`)) })
  w.unref()
  worker = w
  return w
}

/** Hex sha256 of `bytes`: in the worker when they live in a SharedArrayBuffer, else here. */
export async function sha256Hex (bytes: Uint8Array): Promise<string> {
  if (!(bytes.buffer instanceof SharedArrayBuffer) || bytes.byteLength === 0) return createHash('sha256').update(bytes).digest('hex')
  const w = hasher()
  const id = nextId++
  const done = new Promise<string>((resolve, reject) => { pending.set(id, { resolve, reject }) })
  w.ref()
  w.postMessage({ id, buffer: bytes.buffer, offset: bytes.byteOffset, length: bytes.byteLength })
  return await done
}

/** A copy of `values` in a SharedArrayBuffer, which sha256Hex hashes off the main thread. */
export function sharedCopy (values: Float32Array): Float32Array {
  const copy = new Float32Array(new SharedArrayBuffer(values.byteLength))
  copy.set(values)
  return copy
}
