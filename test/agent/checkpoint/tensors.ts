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
