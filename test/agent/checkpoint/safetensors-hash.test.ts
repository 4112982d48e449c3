import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { mkdtemp, open, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { writeSafetensors } from '../../../agent/checkpoint/safetensors.js'
import { sha256Hex, sharedCopy } from '../../../agent/checkpoint/sha256-off-thread.js'

// A snapshot in shared memory is hashed on the worker thread; the hashes and the file must be the
// ones the main-thread path gives for the same values, bit for bit.
test('float32 snapshots in shared memory: hashed off the main thread, same file and same sha256 as the main-thread path', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'avs-hash-'))
  try {
    const values = Float32Array.from({ length: (9 << 20) + 5 }, (_, i) => Math.sin(i * 0.001) * 1e3)
    const small = Float32Array.from([1.5, -2, 3e-7])
    const write = async (name: string, shared: boolean): Promise<{ sha256: string[], bytes: Buffer }> => {
      const fh = await open(join(dir, name), 'wx')
      let r
      try {
        r = await writeSafetensors(fh, [
          { name: 'w', dtype: 'float32', shape: [values.length], data: shared ? sharedCopy(values) : values.slice() },
          { name: 'empty', dtype: 'float32', shape: [0], data: shared ? sharedCopy(new Float32Array(0)) : new Float32Array(0) },
          { name: 's', dtype: 'float32', shape: [3], data: shared ? sharedCopy(small) : small }
        ])
      } finally { await fh.close() }
      return { sha256: r.sha256, bytes: await readFile(join(dir, name)) }
    }
    const [onMain, offMain] = await Promise.all([write('main.safetensors', false), write('worker.safetensors', true)])
    assert.deepEqual(offMain.sha256, onMain.sha256)
    assert.ok(offMain.bytes.equals(onMain.bytes), 'the files are identical')
    assert.equal(offMain.sha256[0], createHash('sha256').update(new Uint8Array(values.buffer)).digest('hex'))
    // Several at once come back to their own callers.
    const parts = Array.from({ length: 5 }, (_, k) => sharedCopy(Float32Array.from({ length: 1000 + k }, (_, i) => i * (k + 1))))
    const hexes = await Promise.all(parts.map(async p => await sha256Hex(new Uint8Array(p.buffer))))
    parts.forEach((p, k) => { assert.equal(hexes[k], createHash('sha256').update(new Uint8Array(p.buffer)).digest('hex'), `part ${k}`) })
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
})
