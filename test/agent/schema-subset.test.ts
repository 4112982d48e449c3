import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { schemaHash, subsetOf, subsetSchemaHash, subsetTag } from '../../agent/schema.js'
import { AveragingError } from '../../agent/errors.js'

const TENSORS = [{ name: 'outer/w', shape: [2, 3] }, { name: 'outer/b', shape: [3] }, { name: 'momentum/w', shape: [2, 3] }, { name: 'momentum/b', shape: [3] }]
const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex')

test('the schema hash of all tensors is what it always was, so agents with and without subsets still group', () => {
  const canonical = JSON.stringify({ dtype: 'float32', compression: 'none', partSizeBytes: 1 << 20, shapes: TENSORS.map(t => t.shape) })
  assert.equal(hex(schemaHash(TENSORS, 'none', 1 << 20)), createHash('sha256').update(canonical).digest('hex'))
})

test('subsetOf: registered order whatever the order named, undefined for all tensors, one sentence for empty, unknown or repeated names', () => {
  assert.deepEqual(subsetOf(TENSORS, ['momentum/w', 'outer/w']), [0, 2])
  assert.equal(subsetOf(TENSORS, ['momentum/b', 'outer/w', 'outer/b', 'momentum/w']), undefined)
  assert.throws(() => subsetOf(TENSORS, []), (e: Error) => e instanceof AveragingError && /at least one/.test(e.message))
  assert.throws(() => subsetOf(TENSORS, ['outer/x']), /"outer\/x", which is not a registered tensor/)
  assert.throws(() => subsetOf(TENSORS, ['outer/w', 'outer/w']), /"outer\/w" twice/)
})

test('each subset has its own schema hash and key tag; the same subset named in another order has the same', () => {
  const a = subsetSchemaHash(TENSORS, [0, 2], 'none', 1 << 20)
  const b = subsetSchemaHash(TENSORS, [1, 3], 'none', 1 << 20)
  assert.notEqual(hex(a), hex(b), 'same shapes, other tensors: other schema')
  assert.notEqual(hex(a), hex(schemaHash(TENSORS, 'none', 1 << 20)))
  assert.equal(hex(subsetSchemaHash(TENSORS, subsetOf(TENSORS, ['momentum/w', 'outer/w'])!, 'none', 1 << 20)), hex(a))
  assert.notEqual(hex(subsetSchemaHash(TENSORS, [0, 2], 'float16', 1 << 20)), hex(a), 'the wire settings count, as for all tensors')
  assert.match(subsetTag(a), /^[0-9a-f]{12}$/)
  assert.notEqual(subsetTag(a), subsetTag(b))
})
