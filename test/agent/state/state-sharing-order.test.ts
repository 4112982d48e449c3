import { test } from 'node:test'
import assert from 'node:assert/strict'
import { orderDonors } from '../../../agent/state/donor-order.js'
import { chunkHead, chunkView, validateHeader } from '../../../agent/state/state-protocol.js'
import { StateChunk } from '../../../agent/proto/averaging.js'
import { Uint8ArrayList } from 'uint8arraylist'

/** A seeded generator so the spread is reproducible. */
function seeded (seed: number): () => number {
  let x = seed >>> 0
  return () => { x = (Math.imul(x, 1664525) + 1013904223) >>> 0; return x / 4294967296 }
}

test('newcomers spread over the near-best donors, leaning to the higher priority, the rest as fallbacks', () => {
  const donors = [
    { peerId: 'a', priority: 100 },
    { peerId: 'b', priority: 99 },
    { peerId: 'c', priority: 98 },
    { peerId: 'old1', priority: 50 },
    { peerId: 'old2', priority: 60 },
    { peerId: 'broken', priority: Number.NaN }
  ]
  const random = seeded(42)
  const firsts = new Map<string, number>()
  for (let i = 0; i < 3000; i++) {
    const order = orderDonors(donors, 2, random)
    assert.equal(order.length, 5, 'every usable donor is listed once')
    assert.deepEqual(new Set(order.slice(0, 3)), new Set(['a', 'b', 'c']), 'the near-best donors come first')
    assert.deepEqual(order.slice(3), ['old2', 'old1'], 'the rest follow by priority')
    firsts.set(order[0], (firsts.get(order[0]) ?? 0) + 1)
  }
  // Weights 3 : 2 : 1 for priorities 100, 99, 98 above the floor of 98.
  const share = (id: string): number => (firsts.get(id) ?? 0) / 3000
  assert.ok(Math.abs(share('a') - 3 / 6) < 0.05, `a first ${share('a')}`)
  assert.ok(Math.abs(share('b') - 2 / 6) < 0.05, `b first ${share('b')}`)
  assert.ok(Math.abs(share('c') - 1 / 6) < 0.05, `c first ${share('c')}`)
})

test('equal priorities are picked uniformly; no donors gives an empty order', () => {
  const donors = ['a', 'b', 'c', 'd'].map(peerId => ({ peerId, priority: 5 }))
  const random = seeded(7)
  const firsts = new Map<string, number>()
  for (let i = 0; i < 4000; i++) {
    const first = orderDonors(donors, 0, random)[0]
    firsts.set(first, (firsts.get(first) ?? 0) + 1)
  }
  for (const id of ['a', 'b', 'c', 'd']) assert.ok(Math.abs((firsts.get(id) ?? 0) / 4000 - 0.25) < 0.04, `${id} first ${firsts.get(id)} times`)
  assert.deepEqual(orderDonors([], 2), [])
})

test('headers are checked before allocation: counts, shapes, sizes and metadata', () => {
  const meta = new TextEncoder().encode('{"step":3}')
  const ok = validateHeader({ metadata: meta, tensors: [{ name: 'w', shape: [2, 3] }], busy: false }, [{ name: 'w', shape: [2, 3] }], 1024)
  assert.equal(ok.totalBytes, 24)
  assert.deepEqual(ok.metadata, { step: 3 })
  assert.throws(() => validateHeader({ metadata: meta, tensors: [{ name: 'w', shape: [2, 4] }], busy: false }, [{ name: 'w', shape: [2, 3] }], 1024), /expected/)
  assert.throws(() => validateHeader({ metadata: meta, tensors: [], busy: false }, [{ name: 'w', shape: [2, 3] }], 1024), /0 tensors where 1/)
  assert.throws(() => validateHeader({ metadata: meta, tensors: [{ name: 'w', shape: [0xffffffff, 0xffffffff, 0xffffffff] }], busy: false }, undefined, 2 ** 31), /more than/)
  // A 1B-parameter model (4 GB of float32) as the trainer registered it: its own layout, not the unknown-layout bound.
  const billion = [{ name: 'embed', shape: [50_000, 4096] }, ...Array.from({ length: 16 }, (_, i) => ({ name: `block.${i}`, shape: [4096, 12_000] }))]
  assert.equal(validateHeader({ metadata: meta, tensors: billion, busy: false }, billion, 2 ** 31).totalBytes, 4 * (50_000 * 4096 + 16 * 4096 * 12_000))
  assert.throws(() => validateHeader({ metadata: meta, tensors: billion, busy: false }, undefined, 2 ** 31), /more than 2147483648 bytes/)
  assert.throws(() => validateHeader({ metadata: meta, tensors: Array(5000).fill({ name: 'x', shape: [1] }), busy: false }, undefined, 2 ** 31), /5000 tensors/)
  assert.throws(() => validateHeader({ metadata: new TextEncoder().encode('[1]'), tensors: [], busy: false }, undefined, 1024), /not a JSON object/)
  assert.throws(() => validateHeader({ metadata: new Uint8Array([0xff, 0x7b]), tensors: [], busy: false }, undefined, 1024), /not valid JSON/)
})

test('a chunk sent as its head and a view of the tensor is the very message StateChunk.encode writes', () => {
  for (const [index, offset, bytes] of [[0, 0, 4], [0, 16384, 65536], [3, 0, 124], [4095, 2 ** 32 - 16384, 65536], [127, 128, 16_380]]) {
    const data = new Uint8Array(bytes).map((_, i) => (i * 7 + index) % 256)
    const head = chunkHead(index, offset, bytes)
    const whole = new Uint8Array(head.byteLength + bytes)
    whole.set(head)
    whole.set(data, head.byteLength)
    assert.deepEqual(whole, StateChunk.encode({ tensorIndex: index, offset, data }), `chunk ${index} at ${offset}, ${bytes} bytes`)
    assert.deepEqual(StateChunk.decode(whole), { tensorIndex: index, offset, data })
  }
})

test('a chunk read as pieces: its fields parsed from the head wherever the transport split the frame, the data a view of the pieces', () => {
  const data = new Uint8Array(1000).map((_, i) => (i * 13) % 256)
  for (const [index, offset] of [[0, 0], [1, 0], [0, 16384], [4095, 2 ** 32 - 16384], [300, 123_456_789]]) {
    const whole = StateChunk.encode({ tensorIndex: index, offset, data })
    for (const cuts of [[], [1], [3], [7, 8], [9, 500], [whole.byteLength - 1], [2, 4, 6, 8, 10, 12]]) {
      const pieces = new Uint8ArrayList()
      let from = 0
      for (const cut of [...cuts, whole.byteLength]) { pieces.append(whole.subarray(from, cut)); from = cut }
      const view = chunkView(pieces)
      assert.ok(view !== null, `chunk ${index} at ${offset} cut at ${cuts.join(', ')}`)
      assert.deepEqual([view.tensorIndex, view.offset], [index, offset])
      assert.deepEqual(view.data.subarray(), data)
    }
  }
  // Not as our donors write it: left to the whole-message decoder (fields out of order, bytes after the data, a truncated head).
  const reordered = new Uint8Array([0x1a, 4, 1, 2, 3, 4, 0x08, 5])
  assert.equal(chunkView(new Uint8ArrayList(reordered)), null)
  assert.deepEqual(StateChunk.decode(reordered), { tensorIndex: 5, offset: 0, data: new Uint8Array([1, 2, 3, 4]) })
  assert.equal(chunkView(new Uint8ArrayList(new Uint8Array([0x08, 1, 0x1a, 4, 1, 2, 3, 4, 9]))), null)
  assert.equal(chunkView(new Uint8ArrayList(new Uint8Array([0x08, 0xff, 0xff]))), null)
  assert.equal(chunkView(new Uint8ArrayList(new Uint8Array([0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x1a, 0]))), null, 'a varint past 5 bytes')
})
