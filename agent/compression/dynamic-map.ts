/**
 * The 256-entry signed dynamic quantisation map used by blockwise8bit, generated the way bitsandbytes'
 * create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8) describes it (our own code, not a copied table):
 * for each decade d = 0..6 the interval [0.1, 1] is cut into 2^d equal pieces, the piece midpoints are scaled by
 * 10^(d − 6) and added with both signs (2·127 = 254 values), then 0 and 1 are added. Values are log-spaced across
 * decades (fine resolution near zero) and linear within one. Sorted ascending; exactly one entry is 0 and the
 * largest is exactly 1, so a block's absmax element (when positive) and zeros round-trip exactly.
 */

export const DYNAMIC_MAP_SIZE = 256

function generate (): Float32Array {
  const values: number[] = [0, 1]
  const decades = 7
  for (let d = 0; d < decades; d++) {
    const pieces = 2 ** d
    const magnitude = 10 ** (d - (decades - 1))
    for (let j = 0; j < pieces; j++) {
      const lo = 0.1 + 0.9 * j / pieces
      const hi = 0.1 + 0.9 * (j + 1) / pieces
      const mid = magnitude * (lo + hi) / 2
      values.push(mid, -mid)
    }
  }
  if (values.length !== DYNAMIC_MAP_SIZE) throw new Error(`dynamic map has ${values.length} entries instead of 256.`)
  values.sort((a, b) => a - b)
  return Float32Array.from(values)
}

/** Sorted code values in [-1, 1]. Do not modify. */
export const DYNAMIC_MAP: Float32Array = generate()

/** Index of the code value 0. */
export const DYNAMIC_MAP_ZERO_INDEX: number = DYNAMIC_MAP.indexOf(0)

/**
 * DYNAMIC_MAP_THRESHOLDS[k] = midpoint between codes k and k + 1 (k < 255), and +Infinity at 255, so that
 * "number of thresholds below v" is the index of the nearest code to v; 256 entries make an 8-step binary search.
 */
export const DYNAMIC_MAP_THRESHOLDS: Float64Array = (() => {
  const t = new Float64Array(DYNAMIC_MAP_SIZE)
  for (let k = 0; k < DYNAMIC_MAP_SIZE - 1; k++) t[k] = (DYNAMIC_MAP[k] + DYNAMIC_MAP[k + 1]) / 2
  t[DYNAMIC_MAP_SIZE - 1] = Infinity
  return t
})()

/** Index of the code nearest to v (v normally in [-1, 1]; values beyond saturate). */
export function nearestCode (v: number): number {
  const t = DYNAMIC_MAP_THRESHOLDS
  let k = 0
  if (t[k + 127] < v) k += 128
  if (t[k + 63] < v) k += 64
  if (t[k + 31] < v) k += 32
  if (t[k + 15] < v) k += 16
  if (t[k + 7] < v) k += 8
  if (t[k + 3] < v) k += 4
  if (t[k + 1] < v) k += 2
  if (t[k] < v) k += 1
  return k
}

/**
 * Fast nearest-code lookup for float32 inputs, keyed by the top 16 bits of the value's float32 pattern (sign,
 * exponent and 7 mantissa bits). Within one such bucket (relative width 2^-7) at most one threshold of the dynamic map
 * lies, so the nearest code is BUCKET_BASE[key] or the next one, decided by one comparison with BUCKET_THRESHOLD[key].
 * Buckets where that does not hold (none for this map, but checked) fall back to the binary search.
 * Gives exactly nearestCode(v) for every float32 v.
 */
export const BUCKET_BASE = new Uint8Array(65536)
export const BUCKET_THRESHOLD = new Float64Array(65536)
export const BUCKET_NEEDS_SEARCH = new Uint8Array(65536)

;(() => {
  const bits = new Uint32Array(2)
  const floats = new Float32Array(bits.buffer)
  for (let key = 0; key < 65536; key++) {
    bits[0] = key << 16
    bits[1] = (key << 16) | 0xffff
    const a = floats[0]
    const b = floats[1]
    if (!Number.isFinite(a) || !Number.isFinite(b)) {
      BUCKET_NEEDS_SEARCH[key] = 1
      continue
    }
    const lo = Math.min(a, b)
    const hi = Math.max(a, b)
    const kLo = nearestCode(lo)
    const kHi = nearestCode(hi)
    if (kHi - kLo > 1) {
      BUCKET_NEEDS_SEARCH[key] = 1
      continue
    }
    BUCKET_BASE[key] = kLo
    BUCKET_THRESHOLD[key] = kHi === kLo ? Infinity : DYNAMIC_MAP_THRESHOLDS[kLo]
  }
})()
