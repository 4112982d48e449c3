import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { accumulateDistance, createReduceKernels, createRegionKernels, defaultKernelBackend, type KernelBackend } from '../../../agent/kernels/reduce-kernels.js'
import { REDUCE_WASM_BASE64 } from '../../../agent/kernels/reduce-wasm.js'

const ROOT = fileURLToPath(new URL('../../../../', import.meta.url))
const BACKENDS: KernelBackend[] = ['wasm-simd', 'js']

/** Deterministic values with varied magnitudes and signs (a float32 array). */
function values (n: number, seed: number): Float32Array {
  const out = new Float32Array(n)
  let x = seed * 7919 + 1
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) % 2147483648
    out[i] = ((x / 2147483648) - 0.5) * 10 ** ((i % 7) - 3)
  }
  return out
}

test('the committed kernel bytes are the compiler\'s output of reduce.wat (run npm run generate:kernels after editing it)', async () => {
  const { compileReduceWat } = await import(new URL('scripts/compile-kernels.mjs', `file://${ROOT}`).href) as { compileReduceWat: (text: string) => Promise<Uint8Array> }
  const bytes = await compileReduceWat(readFileSync(`${ROOT}agent/kernels/reduce.wat`, 'utf8'))
  assert.equal(Buffer.from(bytes).toString('base64'), REDUCE_WASM_BASE64)
})

test('Node 22 runs the WebAssembly SIMD kernels by default', () => {
  assert.equal(defaultKernelBackend(), 'wasm-simd')
})

for (const backend of BACKENDS) {
  test(`${backend}: weighted sums and means are exactly float64 sum of w·x, divided and rounded to float32`, () => {
    for (const n of [1, 3, 4, 5, 1003, 16384]) {
      const k = createReduceKernels(3, 16384, backend)
      assert.equal(k.backend, backend)
      const inputs = [values(n, 1), values(n, 2), values(n, 3)]
      const weights = [1, 0.37, 2.5]
      const expectedSum = new Float64Array(n)
      for (let s = 0; s < 3; s++) {
        k.staging.set(inputs[s])
        assert.equal(k.accumulate(1, n, weights[s], true), true)
        for (let i = 0; i < n; i++) expectedSum[i] += weights[s] * inputs[s][i]
      }
      const weightSum = weights.reduce((a, b) => a + b)
      const mean = k.takeMean(1, n, weightSum)
      assert.ok(mean != null)
      const expected = new Float32Array(n)
      for (let i = 0; i < n; i++) expected[i] = expectedSum[i] / weightSum
      assert.deepEqual(mean, expected, `n=${n}`)
      // The slot was cleared: one contribution of weight 1 now gives that contribution back.
      k.staging.set(inputs[0])
      k.accumulate(1, n, 1, false)
      assert.deepEqual(k.takeMean(1, n, 1), inputs[0])
      // Into memory the caller gives (the reducer's lent wire memory): the same values, there, nothing past n.
      k.staging.set(inputs[1])
      k.accumulate(2, n, 2, false)
      const into = new Float32Array(n + 2).fill(9)
      const got = k.takeMean(2, n, 2, into)
      assert.equal(got?.buffer, into.buffer)
      assert.deepEqual(got, inputs[1])
      assert.deepEqual(into.subarray(n), new Float32Array([9, 9]))
      assert.throws(() => k.takeMean(2, n, 1, new Float32Array(n - 1)), /does not fit/)
    }
  })

  test(`${backend}: NaN and infinities are found anywhere and a checked accumulate adds nothing`, () => {
    const n = 1003
    const k = createReduceKernels(2, n, backend)
    const base = values(n, 5)
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
      for (const at of [0, 1, 500, 999, 1000, 1002]) {
        k.staging.set(base)
        assert.equal(k.allFinite(n), true)
        k.staging[at] = bad
        assert.equal(k.allFinite(n), false, `${bad} at ${at}`)
        assert.equal(k.allFinite(at), true, `only the first ${at} elements are read`)
        assert.equal(k.accumulate(0, n, 1, true), false)
      }
    }
    // Nothing was added by the refused contributions: the slot still means nothing but what follows.
    k.staging.set(base)
    assert.equal(k.accumulate(0, n, 2, true), true)
    assert.deepEqual(k.takeMean(0, n, 2), base)
  })

  test(`${backend}: a mean that leaves float32's range is null and the slot is cleared`, () => {
    const k = createReduceKernels(1, 8, backend)
    k.staging.set([3e38, 3e38, 1, 1, 1, 1, 1, 1])
    k.accumulate(0, 8, 1, true)
    k.accumulate(0, 8, 1, true)
    assert.equal(k.takeMean(0, 8, 0.5), null) // 1.2e39 is finite in float64, not in float32
    k.staging.fill(2)
    k.accumulate(0, 8, 1, true)
    assert.deepEqual(k.takeMean(0, 8, 1), new Float32Array(8).fill(2))
  })

  test(`${backend}: slots are independent, clear zeroes one, and bad slots or counts throw`, () => {
    const k = createReduceKernels(3, 64, backend)
    k.staging.fill(1); k.accumulate(0, 64, 1, false)
    k.staging.fill(5); k.accumulate(2, 64, 1, false)
    k.clear(0, 64)
    k.staging.fill(3); k.accumulate(0, 64, 1, false)
    assert.deepEqual(k.takeMean(0, 64, 1), new Float32Array(64).fill(3))
    assert.deepEqual(k.takeMean(2, 64, 1), new Float32Array(64).fill(5))
    assert.throws(() => k.accumulate(3, 1, 1, false), RangeError)
    assert.throws(() => k.accumulate(-1, 1, 1, false), RangeError)
    assert.throws(() => k.allFinite(65), RangeError)
    assert.throws(() => k.takeMean(0, 65, 1), RangeError)
    const checksOnly = createReduceKernels(0, 16, backend)
    checksOnly.staging.fill(1)
    assert.equal(checksOnly.allFinite(16), true)
    assert.throws(() => checksOnly.accumulate(0, 16, 1, false), RangeError)
  })
}

test('region kernels: the WebAssembly distance sums are bit-identical to accumulateDistance: float64, lane = index mod 4 within each call, summed across calls', () => {
  const wasm = createRegionKernels(4099, 'wasm-simd')
  const js = createRegionKernels(4099, 'js')
  for (const k of [wasm, js]) { k.lanes.fill(0) }
  const lanes = new Float64Array(8)
  const direct = new Float64Array(8)
  // Chunks of varied sizes, the last of each round not a multiple of 4 (a tensor's end).
  for (const [round, sizes] of [[0, [4096, 1003]], [1, [1, 2, 3]], [2, [4099]], [3, [0, 8, 5]]] as const) {
    for (const [c, n] of sizes.entries()) {
      const sent = values(n, 10 * round + c)
      const now = values(n, 100 + 10 * round + c)
      sent[n >> 1] = 0 // a zero and an exact match among the values
      if (n > 2) now[1] = sent[1]
      for (const k of [wasm, js]) { k.sent.set(sent); k.now.set(now); k.addDistance(n) }
      accumulateDistance(lanes, sent, now, n)
      for (let i = 0; i < n; i++) {
        const e = sent[i] - now[i]
        direct[i % 4] += e * e
        direct[4 + (i % 4)] += sent[i] * sent[i]
      }
      assert.deepEqual([...wasm.lanes], [...js.lanes], `round ${round} chunk ${c}: wasm and js lanes`)
      assert.deepEqual([...js.lanes], [...lanes], `round ${round} chunk ${c}: the kernels' lanes are accumulateDistance's`)
      assert.deepEqual([...lanes], [...direct], `round ${round} chunk ${c}: lane = index mod 4, float64 in index order`)
    }
  }
  assert.ok(lanes.every(v => v > 0))
})

test('region kernels: allFinite sees NaN and infinities in sent only, and bad counts throw', () => {
  for (const backend of BACKENDS) {
    const k = createRegionKernels(1003, backend)
    assert.equal(k.backend, backend)
    k.sent.set(values(1003, 9))
    k.now.fill(Number.NaN)
    assert.equal(k.allFinite(1003), true)
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
      for (const at of [0, 3, 4, 1000, 1002]) {
        const keep = k.sent[at]
        k.sent[at] = bad
        assert.equal(k.allFinite(1003), false, `${backend}: ${bad} at ${at}`)
        assert.equal(k.allFinite(at), true, `${backend}: only the first ${at} are read`)
        k.sent[at] = keep
      }
    }
    assert.throws(() => k.allFinite(1004), RangeError)
    assert.throws(() => { k.addDistance(-1) }, RangeError)
  }
})

/**
 * float32 bit patterns where narrowing can go wrong: every sign and exponent with the low bits at
 * and around each rounding boundary (float16 keeps 10 mantissa bits, bfloat16 7), and random
 * mantissas below float16's smallest normal, where the subnormal's rounding shifts by up to 24.
 */
function narrowingCases (): Uint32Array {
  const cases: number[] = []
  // float16 ties at 0x1000 (kept bit even) and 0x3000 (odd); bfloat16's at 0x8000, its kept bit in `high`.
  const lows = [0, 1, 0xfff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x3000, 0x7fff, 0x8000, 0x8001, 0xffff]
  for (let high = 0; high < 1 << 16; high++) {
    for (const low of lows) cases.push(((high << 16) | low) >>> 0)
  }
  let x = 12345
  for (let i = 0; i < 1 << 20; i++) {
    x = (x * 1103515245 + 12345) % 2147483648
    const exponent = 90 + (i % 24) // 2^-37 .. 2^-14: float16's subnormals and what rounds to them
    cases.push((((i & 1) << 31) | (exponent << 23) | (x & 0x7fffff)) >>> 0)
  }
  return Uint32Array.from(cases)
}

test('16-bit conversions: WebAssembly and JavaScript give the same bits for every half and every narrowing case, and agree on what is finite', () => {
  const chunk = 1 << 16
  const kernels = BACKENDS.map(b => createRegionKernels(chunk, b))
  const bytesOf = (k: ReturnType<typeof createRegionKernels>): Uint8Array => new Uint8Array(k.sent.buffer, k.sent.byteOffset, 4 * chunk)
  for (const dtype of ['float16', 'bfloat16'] as const) {
    // Every 16-bit value, widened in place from the upper half of sent.
    const widened = kernels.map(k => {
      const halves = new Uint16Array(k.sent.buffer, k.sent.byteOffset + 2 * chunk, chunk)
      for (let h = 0; h < chunk; h++) halves[h] = h
      k.widenUpper(dtype, chunk)
      return new Uint32Array(k.sent.buffer, k.sent.byteOffset, chunk).slice()
    })
    assert.deepEqual(widened[0], widened[1], `${dtype}: widened bits`)
    // Odd lengths take the kernels' one-at-a-time tails.
    for (const n of [1, 7, 9, 1001]) {
      const got = kernels.map(k => {
        const halves = new Uint16Array(k.sent.buffer, k.sent.byteOffset + 2 * chunk, n)
        for (let h = 0; h < n; h++) halves[h] = (h * 40503) & 0xffff
        k.widenUpper(dtype, n)
        return new Uint32Array(k.sent.buffer, k.sent.byteOffset, n).slice()
      })
      assert.deepEqual(got[0], got[1], `${dtype}: ${n} widened`)
    }
    const cases = narrowingCases()
    for (let at = 0; at < cases.length; at += chunk) {
      const n = Math.min(chunk, cases.length - at) - (at === 0 ? 3 : 0) // one odd length
      const narrowed = kernels.map(k => {
        new Uint32Array(k.now.buffer, k.now.byteOffset, n).set(cases.subarray(at, at + n))
        k.narrowNow(dtype, n)
        return new Uint16Array(bytesOf(k).buffer, k.sent.byteOffset, n).slice()
      })
      if (!narrowed[0].every((h, i) => h === narrowed[1][i])) {
        const i = narrowed[0].findIndex((h, j) => h !== narrowed[1][j])
        assert.fail(`${dtype}: float32 bits 0x${cases[at + i].toString(16)} narrow to 0x${narrowed[0][i].toString(16)} in WebAssembly, 0x${narrowed[1][i].toString(16)} in JavaScript`)
      }
    }
    // Finiteness: a chunk of finite halves, then one infinity or NaN at each place of an 8-lane block and in a tail.
    const exponent = dtype === 'float16' ? 0x7c00 : 0x7f80
    for (const bad of [-1, 0, 3, 7, 8, 15, 2 * chunk - 1, 2 * chunk - 2]) {
      const verdicts = kernels.map(k => {
        const halves = new Uint16Array(bytesOf(k).buffer, k.sent.byteOffset, 2 * chunk)
        for (let h = 0; h < halves.length; h++) halves[h] = (h * 40503) & 0xffff & ~0x4000 // exponent never all ones
        if (bad >= 0) halves[bad] = exponent | (bad & 1)
        return [k.allFinite16(dtype, 2 * chunk), k.allFinite16(dtype, 2 * chunk - 1), k.allFinite16(dtype, 5)]
      })
      assert.deepEqual(verdicts[0], verdicts[1], `${dtype}: finiteness with a bad value at ${bad}`)
      assert.equal(verdicts[0][0], bad < 0, `${dtype}: bad value at ${bad}`)
      assert.equal(verdicts[0][1], bad < 0 || bad === 2 * chunk - 1, `${dtype}: bad value at ${bad}, one value short`)
    }
  }
})
