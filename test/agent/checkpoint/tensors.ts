import { floatBitsToBfloat, floatBitsToHalf, widen } from '../../../agent/workloads/sidecar/dtypes.js'
import type { StorageDtype } from '../../../agent/workloads/sidecar/dtypes.js'
import type { TensorSource } from '../../../agent/checkpoint/index.js'

/** Deterministic values for a round: every tensor's float32 values depend on (round, tensor index, element). */
export function roundTensors (round: number, sizes: ReadonlyArray<[string, StorageDtype, number[]]>): TensorSource[] {
  return sizes.map(([name, dtype, shape], k) => {
    const n = shape.reduce((a, b) => a * b, 1)
    const data = new Float32Array(n)
    for (let i = 0; i < n; i++) data[i] = Math.sin(i * 0.001 + k) * (round + 1) + round
    return { name, dtype, shape, data }
  })
}

/** Cheap deterministic values for a round (no transcendental per element): for the large kill-loop checkpoints. */
export function cheapTensors (round: number, sizes: ReadonlyArray<[string, StorageDtype, number[]]>): TensorSource[] {
  return sizes.map(([name, dtype, shape], k) => {
    const n = shape.reduce((a, b) => a * b, 1)
    const data = new Float32Array(n)
    for (let i = 0; i < n; i++) data[i] = (i & 4095) / 64 + round * 0.25 + k
    return { name, dtype, shape, data }
  })
}

/** What a stored value reads back as: float32 unchanged, 16-bit narrowed round-to-nearest-even then widened. */
export function storedValues (dtype: StorageDtype, data: Float32Array): Float32Array {
  if (dtype === 'float32') return data
  const bits = new Uint32Array(data.buffer, data.byteOffset, data.length)
  const narrow = dtype === 'float16' ? floatBitsToHalf : floatBitsToBfloat
  const out = new Float32Array(data.length)
  widen(dtype, Uint16Array.from(bits, narrow), out, 0)
  return out
}

/** The kill-loop checkpoint: 28 MB in four tensors of the three dtypes. */
export const KILL_SIZES: Array<[string, StorageDtype, number[]]> = [
  ['embed', 'float32', [4096, 1024]], ['h.0', 'bfloat16', [2048, 1024]], ['h.1', 'float16', [1024, 1024]], ['bias', 'float32', [1024]]
]
