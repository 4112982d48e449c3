/**
 * The worker thread behind sha256-off-thread.ts: hashes byte ranges of SharedArrayBuffers, so the
 * agent's event loop only writes them (async I/O) while this hashes the same bytes.
 */
import { createHash } from 'node:crypto'
import { parentPort } from 'node:worker_threads'

interface Job { id: number, buffer: SharedArrayBuffer, offset: number, length: number }

parentPort?.on('message', (job: Job) => {
  try {
    const hex = createHash('sha256').update(new Uint8Array(job.buffer, job.offset, job.length)).digest('hex')
    parentPort?.postMessage({ id: job.id, hex })
  } catch (err) {
    parentPort?.postMessage({ id: job.id, error: (err as Error).message })
  }
})
