import { test } from 'node:test'
import assert from 'node:assert/strict'
import { codecFor } from '../../../agent/compression/index.js'
import { seededRandom } from './random.js'

const codec = codecFor('float16')

/** Slow reference: round |x| to the binary16 grid, nearest with ties to even, clamped to ±65504. */
function referenceHalf (x: number): number {
  if (Number.isNaN(x)) return NaN
  const a = Math.abs(x)
  let result: number
  if (a >= 65504) {
    result = 65504
  } else {
    let e = Math.max(-14, Math.floor(Math.log2(a)))
    while (e > -14 && 2 ** e > a) e--
    while (2 ** (e + 1) <= a) e++
    const ulp = 2 ** (e - 10)
    const q = a / ulp // exact: division by a power of two
    let r = Math.floor(q)
    const frac = q - r
    if (frac > 0.5 || (frac === 0.5 && r % 2 === 1)) r++
    result = Math.min(65504, r * ulp)
  }
  return x < 0 || Object.is(x, -0) ? -result : result
}

function roundTrip (values: Float32Array): Float32Array {
  return codec.decode(codec.encode(values), values.length)
}

test('float16 encodes every one of the 65536 half values back to itself (except NaN payloads and Inf)', () => {
  const halves = new Uint16Array(65536)
  for (let h = 0; h < 65536; h++) halves[h] = h
  const asFloats = codec.decode(new Uint8Array(halves.buffer), 65536)
  const again = new Uint16Array(codec.encode(asFloats).slice().buffer)
  for (let h = 0; h < 65536; h++) {
    const exponent = (h >>> 10) & 0x1f
    if (exponent === 31) {
      if ((h & 0x3ff) === 0) assert.equal(again[h], (h & 0x8000) | 0x7bff, 'Inf clamps to ±65504')
      else assert.ok(Number.isNaN(asFloats[h]) && (again[h] & 0x7c00) === 0x7c00 && (again[h] & 0x3ff) !== 0, 'NaN stays NaN')
    } else {
      assert.equal(again[h], h, `half 0x${h.toString(16)}`)
    }
  }
})

test('float16 rounds to nearest, ties to even, matching a slow reference on random and tie-point inputs', () => {
  const random = seededRandom(1234)
  const bits = new Uint32Array(200_000)
  for (let i = 0; i < bits.length; i++) {
    const r = random()
    if (i % 4 === 0) {
      // Exact tie points and their neighbours in the normal and subnormal half range.
      const exponent = 103 + Math.floor(random() * 40) // float32 exponents around the half range
      bits[i] = (exponent << 23) | ((Math.floor(random() * 1024) << 13) | 0x1000) + (Math.floor(random() * 3) - 1)
      if (random() < 0.5) bits[i] |= 0x80000000
    } else {
      bits[i] = Math.floor(r * 4294967296)
    }
  }
  const values = new Float32Array(bits.buffer)
  const decoded = roundTrip(values)
  for (let i = 0; i < values.length; i++) {
    const want = referenceHalf(values[i])
    if (Number.isNaN(want)) {
      assert.ok(Number.isNaN(decoded[i]))
    } else {
      assert.ok(Object.is(decoded[i], want), `0x${bits[i].toString(16)} (${values[i]}) → ${decoded[i]}, want ${want}`)
    }
  }
})

test('float16 clamps large magnitudes and infinities to ±65504 and keeps signed zeros', () => {
  const values = new Float32Array([65504, 65519, 65520, 1e6, Infinity, -Infinity, -70000, 0, -0, 2 ** -25, 2 ** -24, 3 * 2 ** -25])
  const decoded = roundTrip(values)
  assert.deepEqual([...decoded], [65504, 65504, 65504, 65504, 65504, -65504, -65504, 0, -0, 0, 2 ** -24, 2 ** -23])
  assert.ok(Object.is(decoded[8], -0))
})

test('float16 relative error of any normal value is at most 2^-11', () => {
  const random = seededRandom(99)
  const values = new Float32Array(50_000)
  for (let i = 0; i < values.length; i++) values[i] = (random() - 0.5) * 2 ** (Math.floor(random() * 30) - 13)
  const decoded = roundTrip(values)
  for (let i = 0; i < values.length; i++) {
    if (Math.abs(values[i]) < 2 ** -14) continue
    assert.ok(Math.abs(decoded[i] - values[i]) <= Math.abs(values[i]) * 2 ** -11, `${values[i]} → ${decoded[i]}`)
  }
})
