import { test } from 'node:test'
import assert from 'node:assert/strict'
import { PassThrough } from 'node:stream'
import type { IncomingMessage } from 'node:http'
import { floatBitsToBfloat, floatBitsToHalf, halfToFloat, widen, narrow } from '../../../../agent/workloads/sidecar/dtypes.js'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { REGION_MAGIC, regionLayout, type StoredTensor } from '../../../../agent/workloads/sidecar/region-layout.js'
import { Region, Scratch, narrowThrough, widenThrough } from '../../../../agent/workloads/sidecar/region.js'
import { DistanceSum, outerDivergence, relativeDistance } from '../../../../agent/workloads/sidecar/distance.js'
import { applyOuterStep } from '../../../../agent/outer/outer-step.js'
import { elementCount } from '../../../../agent/schema.js'
import { readTensorsBody } from '../../../../agent/workloads/sidecar/binary-body.js'

const u32 = new Uint32Array(1)
const f32 = new Float32Array(u32.buffer)
const bitsOf = (v: number): number => { f32[0] = v; return u32[0] }
const half = (v: number): number => floatBitsToHalf(bitsOf(v))
const bf = (v: number): number => floatBitsToBfloat(bitsOf(v))

test('float16 widens exactly and every finite half survives the round trip', () => {
  for (let h = 0; h < 65536; h++) {
    const v = halfToFloat(h)
    if (Number.isNaN(v)) assert.ok((h & 0x7c00) === 0x7c00 && (h & 0x3ff) !== 0, `NaN only from NaN bits (${h})`)
    else assert.equal(half(v), h, `half ${h.toString(16)}`)
  }
  assert.equal(halfToFloat(0x0001), 2 ** -24, 'smallest subnormal')
  assert.equal(halfToFloat(0x7bff), 65504)
})

test('float32 to float16 rounds to nearest, ties to even, with subnormals, overflow and NaN', () => {
  assert.equal(half(1 + 2 ** -11), 0x3c00, 'a tie rounds down to the even 1.0')
  assert.equal(half(1 + 3 * 2 ** -11), 0x3c02, 'a tie rounds up to the even mantissa')
  assert.equal(half(1 + 2 ** -11 + 2 ** -20), 0x3c01, 'above the tie rounds up')
  assert.equal(half(65519), 0x7bff)
  assert.equal(half(65520), 0x7c00, 'rounds to infinity past the largest half')
  assert.equal(half(-Infinity), 0xfc00)
  assert.equal(half(2 ** -25), 0, 'half the smallest subnormal ties to zero')
  assert.equal(half(3 * 2 ** -25), 0x0002, 'subnormal tie to even')
  assert.equal(half(2 ** -14 - 2 ** -25), 0x0400, 'the largest subnormal rounds up into the smallest normal')
  assert.equal(half(-0), 0x8000)
  assert.ok(Number.isNaN(halfToFloat(half(Number.NaN))), 'NaN stays NaN')
  assert.ok(Number.isNaN(halfToFloat(floatBitsToHalf(0x7f800001))), 'a NaN with only low mantissa bits stays NaN')
})

test('float32 to bfloat16 rounds to nearest, ties to even, keeps NaN and overflows to infinity', () => {
  assert.equal(bf(1 + 2 ** -8), 0x3f80)
  assert.equal(bf(1 + 3 * 2 ** -8), 0x3f82)
  assert.equal(bf(-2.5), 0xc020)
  assert.equal(bf(3.4028234663852886e38), 0x7f80)
  assert.equal(bf(Infinity), 0x7f80)
  assert.equal(floatBitsToBfloat(0x7f800001) & 0x7fc0, 0x7fc0, 'NaN stays a quiet NaN')
  assert.equal(floatBitsToBfloat(0xffc00000), 0xffc0, 'a negative NaN keeps its sign')
  const back = new Float32Array(3)
  widen('bfloat16', Uint16Array.of(0x3f80, 0xc020, 0x0001), back, 0)
  assert.deepEqual([...back], [1, -2.5, Math.fround(2 ** -133)])
  const out = new Uint16Array(2)
  narrow('float16', Float32Array.of(0.5, -2), 0, out)
  assert.deepEqual([...out], [0x3800, 0xc000])
})

test('region layout: 64-byte header, every tensor 64-aligned, total rounded up to 64', () => {
  const layout = regionLayout([{ name: 'a', shape: [1], dtype: 'float32' }, { name: 'b', shape: [3], dtype: 'bfloat16' }, { name: 'c', shape: [17], dtype: 'float16' }])
  assert.deepEqual(layout.offsets.map(o => [o.offset, o.bytes]), [[64, 4], [128, 6], [192, 34]])
  assert.equal(layout.bytes, 256)
})

function request (chunks: Buffer[], contentLength?: number): IncomingMessage {
  const req = new PassThrough() as unknown as IncomingMessage & PassThrough
  Object.assign(req, { headers: contentLength === undefined ? {} : { 'content-length': String(contentLength) } })
  setImmediate(() => { for (const c of chunks) req.write(c); req.end() })
  return req
}

test('binary bodies parse across any chunk boundary and refuse a wrong length with the expected size', async () => {
  const schema = [{ name: 'a', shape: [3], dtype: 'bfloat16' as const }, { name: 'b', shape: [2], dtype: 'float32' as const }]
  const control = Buffer.from('{"weight":2}')
  const body = Buffer.alloc(4 + control.byteLength + 6 + 8)
  body.writeUInt32LE(control.byteLength, 0)
  control.copy(body, 4)
  let at = 4 + control.byteLength
  for (const h of [0x3f80, 0xc020, 0x4000]) { body.writeUInt16LE(h, at); at += 2 }
  body.writeFloatLE(1.5, at)
  body.writeFloatLE(-7, at + 4)
  for (const size of [1, 3, 5, body.byteLength]) {
    const chunks: Buffer[] = []
    for (let i = 0; i < body.byteLength; i += size) chunks.push(body.subarray(i, i + size))
    const staging = new Float32Array(5)
    assert.deepEqual(await readTensorsBody(request(chunks), schema, staging, new Scratch()), { weight: 2 }, `chunks of ${size}`)
    assert.deepEqual([...staging], [1, -2.5, 2, 1.5, -7], `chunks of ${size}`)
  }
  const expected = /has (\d+|more than \d+) bytes but this schema needs 30 \(4 \+ 12 control bytes \+ 14 tensor bytes\)/
  await assert.rejects(readTensorsBody(request([body.subarray(0, 29)]), schema, new Float32Array(5), new Scratch()), expected)
  await assert.rejects(readTensorsBody(request([body, Buffer.alloc(1)]), schema, new Float32Array(5), new Scratch()), expected)
  await assert.rejects(readTensorsBody(request([body], 31), schema, new Float32Array(5), new Scratch()), /has 31 bytes but this schema needs 30/)
})

test('a region\'s write-back puts the mean in every dtype and adds the exact divergence of what the region held (WebAssembly and JavaScript kernels alike)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'avs-region-unit-'))
  try {
    // Tensors beyond one scratch chunk (1 Mi values) and of odd lengths, in all three dtypes.
    const schema: StoredTensor[] = [
      { name: 'a', shape: [1024 * 1024 + 5], dtype: 'float32' },
      { name: 'b', shape: [3, 7], dtype: 'float16' },
      { name: 'c', shape: [1024 * 1024 + 3], dtype: 'bfloat16' }
    ]
    const layout = regionLayout(schema)
    const sent = schema.map((t, k) => Float32Array.from({ length: elementCount(t.shape) }, (_, i) => Math.sin(i + k) * 4))
    const now = sent.map(v => v.map((x, i) => x * 0.5 + (i % 3)))
    const file = Buffer.alloc(layout.bytes)
    file.write(REGION_MAGIC, 0, 'latin1')
    layout.offsets.forEach((t, k) => {
      if (t.dtype === 'float32') Buffer.from(sent[k].buffer).copy(file, t.offset)
      else {
        // Stored 16-bit values, and `sent` becomes exactly what they widen to.
        const stored = new Uint16Array(sent[k].length)
        narrow(t.dtype, sent[k], 0, stored)
        Buffer.from(stored.buffer).copy(file, t.offset)
        widen(t.dtype, stored, sent[k], 0)
      }
    })
    const divergences: number[] = []
    for (const backend of ['wasm-simd', 'js'] as const) {
      writeFileSync(join(dir, 'r'), file)
      const region = Region.open(dir, 'r', layout)
      const sum = new DistanceSum()
      assert.equal(region.writeBack(now, 7, new Scratch(backend), sum), layout.offsets.reduce((n, t) => n + t.bytes, 0))
      region.close()
      divergences.push(sum.value)
      const back = readFileSync(join(dir, 'r'))
      assert.equal(back.readBigUInt64LE(8) % 2n, 0n, 'seq even after the write')
      assert.equal(back.readBigUInt64LE(16), 7n, 'generation')
      layout.offsets.forEach((t, k) => {
        if (t.dtype === 'float32') assert.deepEqual(new Float32Array(back.buffer.slice(back.byteOffset + t.offset, back.byteOffset + t.offset + t.bytes)), now[k])
        else {
          const expected = new Uint16Array(now[k].length)
          narrow(t.dtype, now[k], 0, expected)
          assert.deepEqual(new Uint16Array(back.buffer.slice(back.byteOffset + t.offset, back.byteOffset + t.offset + t.bytes)), expected, `${t.name} narrowed`)
        }
      })
    }
    assert.equal(divergences[0], divergences[1], 'both backends give the same bits')
    assert.equal(divergences[0], relativeDistance(sent, now), 'the divergence is relativeDistance of what the region held and the mean')
    let diff = 0; let norm = 0
    sent.forEach((v, k) => { v.forEach((x, i) => { diff += (x - now[k][i]) ** 2; norm += x * x }) })
    assert.ok(Math.abs(divergences[0] - Math.sqrt(diff / norm)) < 1e-12, 'and it is ‖sent − now‖/‖sent‖')
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})

test('binary bodies\' 16-bit tensors widen and narrow in place through the scratch, across its chunks, as the JavaScript twins do', () => {
  const scratch = new Scratch()
  const n = 2_500_003 // more than two of the scratch's chunks of 1 Mi values
  for (const dtype of ['float16', 'bfloat16'] as const) {
    const values = Float32Array.from({ length: n }, (_, i) => Math.sin(i) * 2 ** ((i % 40) - 20))
    // Narrowed in place: the 16-bit items start where the float32 values do (packTensors).
    const expected = new Uint16Array(n)
    narrow(dtype, values, 0, expected)
    const buffer = values.slice()
    narrowThrough(scratch, dtype, buffer, new Uint16Array(buffer.buffer, 0, n))
    assert.deepEqual(new Uint16Array(buffer.buffer, 0, n), expected, `${dtype} narrowed`)
    // Widened in place: the 16-bit items in the upper half of the float32 values' bytes (readTensorsBody).
    const wide = new Float32Array(n)
    widen(dtype, expected, wide, 0)
    const into = new Float32Array(n)
    const upper = new Uint16Array(into.buffer, 2 * n, n)
    upper.set(expected)
    widenThrough(scratch, dtype, upper, into)
    assert.deepEqual(new Uint32Array(into.buffer), new Uint32Array(wide.buffer), `${dtype} widened`)
  }
})

test('a pseudo-gradient round reports how far it moved θ from this trainer\'s own θ\', as a θ\' round does', () => {
  const n = 5000
  const theta = Float32Array.from({ length: n }, (_, i) => 1 + Math.sin(i) / 4)
  const m = Float32Array.from({ length: n }, (_, i) => Math.cos(i) / 50)
  const own = Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.7) / 30)
  const mean = Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.3) / 30)
  for (const nesterov of [true, false]) {
    const ownTheta = theta.slice(); const ownM = m.slice()
    applyOuterStep(ownTheta, ownM, own, 0.7, 0.9, nesterov)
    const stepped = theta.slice(); const steppedM = m.slice()
    applyOuterStep(stepped, steppedM, mean, 0.7, 0.9, nesterov)
    const moved = new DistanceSum()
    moved.add(own, mean)
    const reported = outerDivergence(moved, [stepped], 0.7, 0.9, nesterov)
    const direct = relativeDistance([ownTheta], [stepped])
    assert.ok(Math.abs(reported - direct) <= 0.02 * direct, `nesterov ${nesterov}: ${reported} against ${direct}`)
  }
})
