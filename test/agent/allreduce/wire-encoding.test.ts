import { test } from 'node:test'
import assert from 'node:assert/strict'
import { codecFor } from '../../../agent/compression/index.js'
import { encodeForWire, returnWhenFlushed } from '../../../agent/allreduce/wire-encoding.js'
import { lendWireMemory, returnWireMemory } from '../../../agent/net/wire-memory.js'

// The pool hands out the newest spare buffer that fits: one given back is the next one lent.
const SIZE = 64 * 1024

test('lent wire memory is lent again only once it is given back, and given back once', () => {
  const a = lendWireMemory(SIZE)
  const b = lendWireMemory(SIZE)
  assert.notEqual(a.buffer, b.buffer)
  returnWireMemory(a)
  returnWireMemory(a)
  const c = lendWireMemory(SIZE)
  assert.equal(c.buffer, a.buffer, 'reused once back')
  assert.notEqual(lendWireMemory(SIZE).buffer, a.buffer, 'given back twice, lent once')
  returnWireMemory(new Uint8Array(SIZE))
  assert.equal(lendWireMemory(100).byteLength, 100, 'small memory is its own')
})

test('returnWhenFlushed gives memory back after every write flushed, and never after a failed one', () => {
  const m = lendWireMemory(SIZE)
  const flushed = returnWhenFlushed(m, 3)
  flushed(); flushed()
  assert.notEqual(lendWireMemory(SIZE).buffer, m.buffer, 'two of three writes flushed: still in use')
  flushed()
  assert.equal(lendWireMemory(SIZE).buffer, m.buffer, 'all three flushed: back')

  const f = lendWireMemory(SIZE)
  const failing = returnWhenFlushed(f, 2)
  failing(new Error('connection reset')); failing()
  assert.notEqual(lendWireMemory(SIZE).buffer, f.buffer, 'a write that failed may still hold it: never back')

  const z = lendWireMemory(SIZE)
  returnWhenFlushed(z, 0)
  assert.equal(lendWireMemory(SIZE).buffer, z.buffer, 'no writes: back at once')
})

test('encodeForWire: float16 in lent memory with encode\'s bytes, none as a view of the values', () => {
  const values = new Float32Array(SIZE / 2).map((_, i) => Math.sin(i) * 1000)
  const half = codecFor('float16')
  const wire = encodeForWire(half, values)
  assert.deepEqual(wire, half.encode(values))
  returnWireMemory(wire)
  assert.equal(lendWireMemory(SIZE).buffer, wire.buffer, 'it was lent memory')
  const raw = encodeForWire(codecFor('none'), values)
  assert.equal(raw.buffer, values.buffer)
})
