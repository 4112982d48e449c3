import { test } from 'node:test'
import { Uint8ArrayList } from 'uint8arraylist'
import assert from 'node:assert/strict'
import { codecFor } from '../../../agent/compression/index.js'
import { makeFloat16Codec } from '../../../agent/compression/float16.js'
import { createHalfKernels } from '../../../agent/kernels/half-kernels.js'
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

test('float16 encodeInto writes encode\'s bits into the memory it is given, and refuses memory too small or misaligned', () => {
  const random = seededRandom(77)
  const bits = new Uint32Array(5001)
  for (let i = 0; i < bits.length; i++) bits[i] = Math.floor(random() * 4294967296)
  bits.set([0x7fc00001, 0xff800000, 0x477ff000, 0x80000000, 0x00000001], 0)
  const values = new Float32Array(bits.buffer)
  const expected = codec.encode(values)
  const memory = new Uint8Array(2 * values.length + 10).fill(0xa5)
  const out = codec.encodeInto!(values, memory.subarray(4))
  assert.equal(out.buffer, memory.buffer, 'encoded in the memory given')
  assert.equal(out.byteOffset, 4)
  assert.deepEqual(out, expected)
  assert.deepEqual(memory.subarray(4 + out.byteLength), new Uint8Array(6).fill(0xa5), 'nothing written past the encoding')
  assert.throws(() => codec.encodeInto!(values, new Uint8Array(2 * values.length - 1)), /need 10002 bytes, the output holds 10001/)
  assert.throws(() => codec.encodeInto!(values, memory.subarray(1)), /2-byte aligned/)
})

test('float16 decodePiecesInto gives decode\'s values from chunks split anywhere, at any alignment', () => {
  const random = seededRandom(78)
  const halves = new Uint16Array(3000)
  for (let i = 0; i < halves.length; i++) halves[i] = Math.floor(random() * 65536)
  const bytes = new Uint8Array(halves.buffer)
  const expected = new Uint32Array(codec.decode(bytes, halves.length).buffer)
  for (let trial = 0; trial < 40; trial++) {
    // Chunks of 0 to 9 bytes, then larger ones, each copied to an odd or even offset of its own buffer.
    const chunks: Uint8Array[] = []
    for (let at = 0; at < bytes.length;) {
      const size = Math.min(bytes.length - at, trial % 2 === 0 ? Math.floor(random() * 10) : 1 + Math.floor(random() * 700))
      const offset = Math.floor(random() * 3)
      const own = new Uint8Array(size + offset + 2)
      own.set(bytes.subarray(at, at + size), offset)
      chunks.push(own.subarray(offset, offset + size))
      at += size
    }
    const out = new Float32Array(halves.length + 5).fill(7)
    const decoded = codec.decodePiecesInto!(new Uint8ArrayList(...chunks), halves.length, out)
    assert.equal(decoded.buffer, out.buffer)
    assert.deepEqual(new Uint32Array(out.buffer, 0, halves.length), expected, `trial ${trial}: ${chunks.length} chunks`)
    assert.deepEqual(out.subarray(halves.length), new Float32Array(5).fill(7), 'nothing written past n')
  }
  assert.throws(() => codec.decodePiecesInto!(new Uint8ArrayList(bytes.subarray(1)), halves.length, new Float32Array(halves.length)), /3000 values need 6000 encoded bytes, got 5999/)
})

/** Where two arrays of bits first differ (-1: nowhere), so a failure names one value, not a million. */
function sameBits (a: Uint16Array | Uint32Array, b: Uint16Array | Uint32Array, what: string): void {
  assert.equal(a.length, b.length, what)
  const i = a.findIndex((x, k) => x !== b[k])
  assert.equal(i, -1, `${what}: at ${i}, 0x${a[i]?.toString(16)} against 0x${b[i]?.toString(16)}`)
}

test('float16 in WebAssembly SIMD and in JavaScript give the same bits, both ways, for every kind of value', () => {
  const wasm = makeFloat16Codec(createHalfKernels)
  const js = makeFloat16Codec(() => null)
  assert.ok(createHalfKernels() !== null, 'this runtime has WebAssembly SIMD')
  const random = seededRandom(79)
  const bits = new Uint32Array(1_000_003)
  for (let i = 0; i < bits.length; i++) bits[i] = Math.floor(random() * 4294967296)
  // NaNs with payloads, infinities, the clamp's edges, the smallest normal half, subnormal ties, signed zeros.
  bits.set([0x7fc00000, 0xffc00001, 0x7f800001, 0xff812345, 0x7f800000, 0xff800000, 0x477fe000, 0x477fefff, 0x477ff000,
    0xc77ff000, 0x38800000, 0x387fffff, 0x33800000, 0x33000000, 0x33000001, 0x80000000, 0x00000000, 0x00000001], 0)
  // Values near the half range, where rounding happens, for most of the rest.
  for (let i = 18; i < bits.length; i += 2) bits[i] = ((100 + Math.floor(random() * 45)) << 23) | (bits[i] & 0x807fffff)
  const values = new Float32Array(bits.buffer)
  const fromWasm = wasm.encode(values)
  sameBits(new Uint16Array(fromWasm.buffer), new Uint16Array(js.encode(values).buffer), 'encode')
  const halves = new Uint16Array(65536).map((_, h) => h)
  const all = new Uint8Array(halves.buffer)
  sameBits(new Uint32Array(wasm.decode(all, 65536).buffer), new Uint32Array(js.decode(all, 65536).buffer), 'decode')
  // Chunks at odd offsets, split inside a value: the same values from both.
  const chunks = [all.subarray(0, 3), all.slice(3, 1001), all.subarray(1001)]
  const a = wasm.decodePiecesInto!(new Uint8ArrayList(...chunks), 65536, new Float32Array(65536))
  const b = js.decodePiecesInto!(new Uint8ArrayList(...chunks), 65536, new Float32Array(65536))
  sameBits(new Uint32Array(a.buffer), new Uint32Array(b.buffer), 'decodePiecesInto')
  // A part larger than the kernels' memory so far grows it, and a small one after still converts right.
  const small = new Float32Array([1.5, -2.25, 65536, Number.NaN, 1e-8])
  sameBits(new Uint16Array(wasm.encode(small).buffer), new Uint16Array(js.encode(small).buffer), 'a small part after a large one')
})
