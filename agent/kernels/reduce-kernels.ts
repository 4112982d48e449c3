import { REDUCE_WASM_BASE64 } from './reduce-wasm.js'

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
  /** sums[slot] / weightSum as a new float32 array (null when a value is not finite); clears the slot. */
  takeMean: (slot: number, n: number, weightSum: number) => Float32Array | null
  /** Zeroes slot's first n sums (a part finished without a mean). */
  clear: (slot: number, n: number) => void
}

interface WasmExports {
  finite: (v: number, n: number) => number
  accumulate: (s: number, v: number, n: number, w: number, check: number) => number
  mean: (out: number, s: number, n: number, w: number) => number
}

let compiled: WebAssembly.Module | null | undefined

function wasmModule (): WebAssembly.Module | null {
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
    takeMean (slot, n, weightSum) {
      const finite = kernels.mean(0, slotAt(slot), count(n), weightSum) === 1
      return finite ? staging.slice(0, n) : null
    },
    clear: (slot, n) => { new Float64Array(memory.buffer, slotAt(slot), count(n)).fill(0) }
  }
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
    takeMean (i, n, weightSum) {
      const sum = slot(i)
      const out = new Float32Array(count(n))
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
