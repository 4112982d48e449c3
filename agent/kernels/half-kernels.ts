import { wasmModule } from './reduce-kernels.js'

/**
 * The float16 wire codec's conversions in WebAssembly SIMD (reduce.wat: clamp, narrow, widen), in
 * scratch memory of their own that grows to the largest part seen. A part's values are copied in,
 * converted in place and copied out: the copies cost less than a JavaScript loop's per-value work
 * (a 64 KiB part: ~1 ns a value each way against 3–5 in JavaScript, more once another process
 * shares the core's cache), and the wire bytes may lie at any alignment and across any chunks.
 */
export interface HalfKernels {
  /** out[0, 2n) = values as binary16: clamped to ±65504, rounded to nearest even, a NaN kept a NaN. */
  encode: (values: Float32Array, out: Uint8Array) => void
  /** out[0, n) = the n binary16 values whose bytes are the chunks' in order (2n bytes in all, checked by the caller). */
  decode: (chunks: Iterable<Uint8Array>, n: number, out: Float32Array) => void
}

interface HalfExports {
  clamp: (v: number, n: number, limit: number) => void
  widen: (s: number, d: number, n: number, bf: number) => void
  narrow: (s: number, d: number, n: number, bf: number) => void
}

const HALF_MAX = 65504
const PAGE = 65536

/** The kernels, or null where this runtime has no WebAssembly SIMD (the codec's JavaScript does the same). */
export function createHalfKernels (): HalfKernels | null {
  const module = wasmModule()
  if (module == null) return null
  const memory = new WebAssembly.Memory({ initial: 1 })
  const k = new WebAssembly.Instance(module, { env: { memory } }).exports as unknown as HalfExports
  let bytes = new Uint8Array(memory.buffer)
  let floats = new Float32Array(memory.buffer)
  /** Room for n float32 at offset 0 (growing detaches the old views: they are made again). */
  const room = (n: number): void => {
    if (4 * n <= memory.buffer.byteLength) return
    memory.grow(Math.ceil((4 * n - memory.buffer.byteLength) / PAGE))
    bytes = new Uint8Array(memory.buffer)
    floats = new Float32Array(memory.buffer)
  }
  return {
    encode (values, out) {
      const n = values.length
      room(n)
      floats.set(values)
      k.clamp(0, n, HALF_MAX)
      // In place: each block of values is read before its halves are written over its start.
      k.narrow(0, 0, n, 0)
      out.set(bytes.subarray(0, 2 * n))
    },
    decode (chunks, n, out) {
      room(n)
      // The halves go to the upper half of the n floats' room, and widen in place from there.
      let at = 2 * n
      for (const chunk of chunks) {
        bytes.set(chunk, at)
        at += chunk.byteLength
      }
      k.widen(2 * n, 0, n, 0)
      out.set(floats.subarray(0, n))
    }
  }
}
