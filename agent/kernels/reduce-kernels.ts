import { REDUCE_WASM_BASE64 } from './reduce-wasm.js'
import { firstNonFinite16, narrow, widen } from '../workloads/sidecar/dtypes.js'

export type KernelBackend = 'wasm-simd' | 'js'

/**
 * The per-element work of one all-reduce: finiteness checks, weighted float64 sums of a span's
 * parts in flight (one slot per part, reused as parts finish), and means back in float32. Decoded
 * values are written into `staging` and read there, so checking and summing cost no extra copy.
 * Both backends give bit-identical results; WebAssembly SIMD needs about a quarter of the CPU.
 */
export interface ReduceKernels {
  readonly backend: KernelBackend
  /** Where a part's float32 values go before they are checked or summed (maxElements long). */
  readonly staging: Float32Array
  /** True when staging[0, n) holds no NaN and no infinity. */
  allFinite: (n: number) => boolean
  /**
   * sums[slot] += weight × staging[0, n). With `check`, a NaN or infinity in staging adds nothing
   * and returns false.
   */
  accumulate: (slot: number, n: number, weight: number, check: boolean) => boolean
  /**
   * sums[slot] / weightSum as float32, in `out` (its first n values) or else a new array; null when a
   * value is not finite. Clears the slot.
   */
  takeMean: (slot: number, n: number, weightSum: number, out?: Float32Array) => Float32Array | null
  /** Zeroes slot's first n sums (a part finished without a mean). */
  clear: (slot: number, n: number) => void
}

interface WasmExports {
  finite: (v: number, n: number) => number
  accumulate: (s: number, v: number, n: number, w: number, check: number) => number
  mean: (out: number, s: number, n: number, w: number) => number
  distance: (a: number, b: number, n: number, acc: number) => void
  finite16: (v: number, n: number, mask: number) => number
  widen: (s: number, d: number, n: number, bf: number) => void
  narrow: (s: number, d: number, n: number, bf: number) => void
}

let compiled: WebAssembly.Module | null | undefined

/** reduce.wat compiled, once per thread and shared by every instance; null without WebAssembly SIMD. */
export function wasmModule (): WebAssembly.Module | null {
  if (compiled === undefined) {
    try {
      compiled = new WebAssembly.Module(Buffer.from(REDUCE_WASM_BASE64, 'base64'))
    } catch {
      compiled = null // no WebAssembly SIMD in this runtime: the JavaScript kernels do the same work
    }
  }
  return compiled
}

/** The backend createReduceKernels picks when not told: WebAssembly SIMD where the runtime has it. */
export function defaultKernelBackend (): KernelBackend {
  return wasmModule() != null ? 'wasm-simd' : 'js'
}

/** Kernels with `slots` float64 sum slots of maxElements each (0 slots: only staging and checks). */
export function createReduceKernels (slots: number, maxElements: number, backend: KernelBackend = defaultKernelBackend()): ReduceKernels {
  if (!Number.isSafeInteger(slots) || slots < 0) throw new Error(`slots must be a non-negative integer, got ${slots}`)
  if (!Number.isSafeInteger(maxElements) || maxElements < 1) throw new Error(`maxElements must be a positive integer, got ${maxElements}`)
  if (backend === 'wasm-simd') {
    const module = wasmModule()
    if (module == null) throw new Error('this runtime cannot compile the WebAssembly SIMD kernels')
    return wasmKernels(module, slots, maxElements)
  }
  return jsKernels(slots, maxElements)
}

function wasmKernels (module: WebAssembly.Module, slots: number, maxElements: number): ReduceKernels {
  const stagingBytes = Math.ceil((4 * maxElements) / 16) * 16
  const slotBytes = Math.ceil((8 * maxElements) / 16) * 16
  const totalBytes = stagingBytes + slots * slotBytes
  if (totalBytes > 2 ** 31) throw new Error(`${slots} sum slots of ${maxElements} elements need ${totalBytes} bytes, above the 2 GiB the kernels address`)
  // Sized once and never grown, so the views below stay attached.
  const memory = new WebAssembly.Memory({ initial: Math.max(1, Math.ceil(totalBytes / 65536)) })
  const kernels = new WebAssembly.Instance(module, { env: { memory } }).exports as unknown as WasmExports
  const staging = new Float32Array(memory.buffer, 0, maxElements)
  const slotAt = (slot: number): number => {
    if (!(slot >= 0 && slot < slots)) throw new RangeError(`sum slot ${slot} is outside 0..${slots - 1}`)
    return stagingBytes + slot * slotBytes
  }
  const count = elementCount(maxElements)
  return {
    backend: 'wasm-simd',
    staging,
    allFinite: (n) => kernels.finite(0, count(n)) === 1,
    accumulate: (slot, n, weight, check) => kernels.accumulate(slotAt(slot), 0, count(n), weight, check ? 1 : 0) === 1,
    takeMean (slot, n, weightSum, out) {
      const finite = kernels.mean(0, slotAt(slot), count(n), weightSum) === 1
      if (!finite) return null
      if (out === undefined) return staging.slice(0, n)
      const mean = outView(out, n)
      mean.set(staging.subarray(0, n))
      return mean
    },
    clear: (slot, n) => { new Float64Array(memory.buffer, slotAt(slot), count(n)).fill(0) }
  }
}

/** out's first n values, where a mean goes. */
function outView (out: Float32Array, n: number): Float32Array {
  if (out.length < n) throw new RangeError(`a mean of ${n} values does not fit an array of ${out.length}`)
  return out.subarray(0, n)
}

/** A checker of element counts against the kernels' size. */
function elementCount (maxElements: number): (n: number) => number {
  return (n) => {
    if (!(Number.isInteger(n) && n >= 0 && n <= maxElements)) throw new RangeError(`${n} elements is outside 0..${maxElements}`)
    return n
  }
}

function jsKernels (slots: number, maxElements: number): ReduceKernels {
  const count = elementCount(maxElements)
  const staging = new Float32Array(maxElements)
  const sums: Float64Array[] = []
  const slot = (i: number): Float64Array => {
    if (!(i >= 0 && i < slots)) throw new RangeError(`sum slot ${i} is outside 0..${slots - 1}`)
    sums[i] ??= new Float64Array(maxElements)
    return sums[i]
  }
  const allFinite = (n: number): boolean => {
    count(n)
    for (let i = 0; i < n; i++) if (!Number.isFinite(staging[i])) return false
    return true
  }
  return {
    backend: 'js',
    staging,
    allFinite,
    accumulate (i, n, weight, check) {
      if (check && !allFinite(n)) return false
      const sum = slot(i)
      for (let k = 0; k < n; k++) sum[k] += weight * staging[k]
      return true
    },
    takeMean (i, n, weightSum, into) {
      const sum = slot(i)
      const out = into !== undefined ? outView(into, count(n)) : new Float32Array(count(n))
      let finite = true
      for (let k = 0; k < n; k++) {
        out[k] = sum[k] / weightSum
        if (!Number.isFinite(out[k])) finite = false
        sum[k] = 0
      }
      return finite ? out : null
    },
    clear: (i, n) => { slot(i).fill(0, 0, count(n)) }
  }
}

/**
 * The sidecar's passes over a trainer's region, one chunk at a time: the finiteness check of what the
 * trainer sent, the divergence sums of a step (sent against the round's result), and the 16-bit
 * storage dtypes widened to float32 and narrowed back. `sent` and `now`
 * live in the kernels' memory, so a chunk read from the region and one copied from the agent's tensors
 * are scanned where they lie. Both backends give bit-identical sums (accumulateDistance is the twin).
 */
export interface RegionKernels {
  readonly backend: KernelBackend
  /** maxElements float32 (16-byte aligned): a chunk of what the trainer sent. */
  readonly sent: Float32Array
  /** maxElements float32 (16-byte aligned): the same chunk of the agent's values. */
  readonly now: Float32Array
  /** The divergence sums in 8 float64 lanes (see accumulateDistance); the caller may read, set and zero them. */
  readonly lanes: Float64Array
  /** True when sent[0, n) holds no NaN and no infinity. */
  allFinite: (n: number) => boolean
  /** lanes += the divergence terms of sent[0, n) against now[0, n). */
  addDistance: (n: number) => void
  /** True when the n 16-bit values at the start of sent's bytes hold no infinity and no NaN (n up to 2 × maxElements). */
  allFinite16: (dtype: HalfDtype, n: number) => boolean
  /** sent[0, n) = the n 16-bit values at the start of the upper half of sent's bytes, widened in place (n up to maxElements). */
  widenUpper: (dtype: HalfDtype, n: number) => void
  /** The first 2n bytes of sent = now[0, n) narrowed, round to nearest even. */
  narrowNow: (dtype: HalfDtype, n: number) => void
}

/** The 16-bit storage dtypes (agent/workloads/sidecar/dtypes.ts), which the region kernels convert. */
export type HalfDtype = 'float16' | 'bfloat16'

/** The exponent bits of each 16-bit dtype: all set is an infinity or a NaN. */
const EXPONENT_MASK: Record<HalfDtype, number> = { float16: 0x7c00, bfloat16: 0x7f80 }

/**
 * The JavaScript twin of reduce.wat's `distance`: lanes[i mod 4] += (sent[i] − now[i])² and
 * lanes[4 + i mod 4] += sent[i]², all in float64, for i in [0, n). Four independent sums per quantity
 * (what SIMD computes) in index order each; the same bits as the kernel.
 */
export function accumulateDistance (lanes: Float64Array, sent: Float32Array, now: Float32Array, n: number = sent.length): void {
  let d0 = lanes[0]; let d1 = lanes[1]; let d2 = lanes[2]; let d3 = lanes[3]
  let s0 = lanes[4]; let s1 = lanes[5]; let s2 = lanes[6]; let s3 = lanes[7]
  const end = n - (n % 4)
  let i = 0
  for (; i < end; i += 4) {
    const a0 = sent[i]; const a1 = sent[i + 1]; const a2 = sent[i + 2]; const a3 = sent[i + 3]
    const e0 = a0 - now[i]; const e1 = a1 - now[i + 1]; const e2 = a2 - now[i + 2]; const e3 = a3 - now[i + 3]
    d0 += e0 * e0; d1 += e1 * e1; d2 += e2 * e2; d3 += e3 * e3
    s0 += a0 * a0; s1 += a1 * a1; s2 += a2 * a2; s3 += a3 * a3
  }
  lanes[0] = d0; lanes[1] = d1; lanes[2] = d2; lanes[3] = d3
  lanes[4] = s0; lanes[5] = s1; lanes[6] = s2; lanes[7] = s3
  for (let lane = 0; i < n; i++, lane++) {
    const a = sent[i]
    const e = a - now[i]
    lanes[lane] += e * e
    lanes[4 + lane] += a * a
  }
}

/** Region kernels for chunks of up to maxElements values. */
export function createRegionKernels (maxElements: number, backend: KernelBackend = defaultKernelBackend()): RegionKernels {
  if (!Number.isSafeInteger(maxElements) || maxElements < 1) throw new Error(`maxElements must be a positive integer, got ${maxElements}`)
  const count = elementCount(maxElements)
  const halves = elementCount(2 * maxElements)
  if (backend === 'wasm-simd') {
    const module = wasmModule()
    if (module == null) throw new Error('this runtime cannot compile the WebAssembly SIMD kernels')
    const bytes = Math.ceil((4 * maxElements) / 16) * 16
    if (2 * bytes + 64 > 2 ** 31) throw new Error(`region kernels of ${maxElements} elements need more than the 2 GiB the kernels address`)
    const memory = new WebAssembly.Memory({ initial: Math.max(1, Math.ceil((2 * bytes + 64) / 65536)) })
    const kernels = new WebAssembly.Instance(module, { env: { memory } }).exports as unknown as WasmExports
    return {
      backend,
      sent: new Float32Array(memory.buffer, 0, maxElements),
      now: new Float32Array(memory.buffer, bytes, maxElements),
      lanes: new Float64Array(memory.buffer, 2 * bytes, 8),
      allFinite: (n) => kernels.finite(0, count(n)) === 1,
      addDistance: (n) => { kernels.distance(0, bytes, count(n), 2 * bytes) },
      allFinite16: (dtype, n) => kernels.finite16(0, halves(n), EXPONENT_MASK[dtype]) === 1,
      widenUpper: (dtype, n) => { kernels.widen(2 * maxElements, 0, count(n), dtype === 'bfloat16' ? 1 : 0) },
      narrowNow: (dtype, n) => { kernels.narrow(bytes, 0, count(n), dtype === 'bfloat16' ? 1 : 0) }
    }
  }
  const sent = new Float32Array(maxElements)
  const now = new Float32Array(maxElements)
  const lanes = new Float64Array(8)
  const u16 = new Uint16Array(sent.buffer, 0, 2 * maxElements)
  return {
    backend,
    sent,
    now,
    lanes,
    allFinite (n) {
      count(n)
      for (let i = 0; i < n; i++) if (!Number.isFinite(sent[i])) return false
      return true
    },
    addDistance: (n) => { accumulateDistance(lanes, sent, now, count(n)) },
    allFinite16: (dtype, n) => firstNonFinite16(dtype, u16.subarray(0, halves(n))) < 0,
    widenUpper: (dtype, n) => { widen(dtype, u16.subarray(maxElements, maxElements + count(n)), sent, 0) },
    narrowNow: (dtype, n) => { narrow(dtype, now, 0, u16.subarray(0, count(n))) }
  }
}
