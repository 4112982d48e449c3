import { test } from 'node:test'
import assert from 'node:assert/strict'
import { decodeFloat32, encodeFloat32, firstNonFinite, jsonWithTensors } from '../../../../agent/workloads/sidecar/tensor-codec.js'

test('float32 base64 round-trips, and text outside the alphabet or of partial floats is refused', () => {
  const a = Float32Array.of(1.5, -0, 3.4e38, 1e-45, -7)
  assert.deepEqual(decodeFloat32(encodeFloat32(a)), a)
  assert.deepEqual(decodeFloat32(''), new Float32Array(0))
  const text = encodeFloat32(a)
  assert.equal(decodeFloat32(text.slice(0, 4) + '!' + text.slice(5)), undefined, 'a character outside base64')
  assert.equal(decodeFloat32(text.slice(0, -1)), undefined, 'length not a multiple of 4')
  assert.equal(decodeFloat32(Buffer.from([1, 2, 3]).toString('base64')), undefined, '3 bytes are no whole float')
  assert.equal(encodeFloat32(new Float32Array([0, 1, 2]).subarray(1)), encodeFloat32(Float32Array.of(1, 2)), 'views encode their own bytes only')
})

test('firstNonFinite finds NaN and infinities, not large finite values', () => {
  assert.equal(firstNonFinite(Float32Array.of(1, 3.4e38, -3.4e38)), -1)
  assert.equal(firstNonFinite(Float32Array.of(1, 2, Number.NaN)), 2)
  assert.equal(firstNonFinite(Float32Array.of(Number.NEGATIVE_INFINITY)), 0)
})

test('jsonWithTensors makes the same JSON as JSON.stringify, with and without other members', () => {
  const w = Float32Array.of(1, 2, 3)
  const b = Float32Array.of(-1)
  const parse = (chunks: string[]): unknown => JSON.parse(chunks.join(''))
  assert.deepEqual(parse(jsonWithTensors({ averaged: true, n: 2 }, [['w', w], ['b "quoted"', b]])),
    { averaged: true, n: 2, tensors: { w: encodeFloat32(w), 'b "quoted"': encodeFloat32(b) } })
  assert.deepEqual(parse(jsonWithTensors({}, [['w', w]])), { tensors: { w: encodeFloat32(w) } })
  assert.deepEqual(parse(jsonWithTensors({ x: undefined }, [])), { tensors: {} })
})
