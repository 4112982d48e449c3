/** Tensor values for the sidecar tests whose means are exact: dyadic, small, exact in their storage dtype. */
import type { StoredValues, TensorSpec } from '../../../../clients/typescript/sidecar-client.js'
import { floatBitsToBfloat, floatBitsToHalf, halfToFloat } from '../../../../agent/workloads/sidecar/dtypes.js'

export const count = (t: TensorSpec): number => t.shape.reduce((a, b) => a * b, 1)

/**
 * Small dyadic values (exact in their dtype), a different draw per agent and step: with weights
 * summing to a power of two the float32 arithmetic of a round is exact, so the float64 mean is the
 * agent's mean bit for bit, and only the narrowing back to 16 bits rounds (round-to-nearest-even,
 * which the expected values apply too: narrowOne).
 */
export function dyadicValues (specs: readonly TensorSpec[], agent: number, step: number): Record<string, StoredValues> {
  let x = (agent * 7919 + step * 104729 + 1) >>> 0
  const next = (range: number): number => { x = (Math.imul(x, 1664525) + 1013904223) >>> 0; return (x % (2 * range + 1)) - range }
  return Object.fromEntries(specs.map(t => {
    const n = count(t)
    if (t.dtype === 'float16') return [t.name, Uint16Array.from({ length: n }, () => floatBitsToHalf(f32Bits(next(2047) / 16)))]
    if (t.dtype === 'bfloat16') return [t.name, Uint16Array.from({ length: n }, () => floatBitsToBfloat(f32Bits(next(255) / 16)))]
    return [t.name, Float32Array.from({ length: n }, () => next(1 << 20) / 64)]
  }))
}

const bits = new Uint32Array(1)
const asFloat = new Float32Array(bits.buffer)
export function f32Bits (v: number): number { asFloat[0] = v; return bits[0] }
/** A stored value (16-bit pattern or float32) as the number it stands for. */
export function widenOne (t: TensorSpec, v: number): number { return t.dtype === 'float16' ? halfToFloat(v) : t.dtype === 'bfloat16' ? (bits[0] = v << 16, asFloat[0]) : v }
/** A number stored in the tensor's dtype, rounded to nearest even. */
export function narrowOne (t: TensorSpec, v: number): number { return t.dtype === 'float16' ? floatBitsToHalf(f32Bits(v)) : t.dtype === 'bfloat16' ? floatBitsToBfloat(f32Bits(v)) : Math.fround(v) }
