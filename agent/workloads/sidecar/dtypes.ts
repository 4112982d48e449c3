/**
 * Storage dtypes a trainer may register. The agent always averages in float32 (the wire is float32
 * whatever the storage): a 16-bit value widens exactly, and the mean narrows back
 * round-to-nearest-even, which is what torch's `.to(torch.float16 / torch.bfloat16)` does.
 */
export type StorageDtype = 'float32' | 'float16' | 'bfloat16'

export const DTYPES: readonly StorageDtype[] = ['float32', 'float16', 'bfloat16']

export function isDtype (v: unknown): v is StorageDtype {
  return typeof v === 'string' && (DTYPES as readonly string[]).includes(v)
}

export function itemSize (dtype: StorageDtype): number {
  return dtype === 'float32' ? 4 : 2
}

/** 64 Ki float16 values widen by table lookup: 256 KiB once, far faster than bit arithmetic per value. */
let halfTable: Float32Array | undefined
function halfToFloatTable (): Float32Array {
  if (halfTable !== undefined) return halfTable
  halfTable = new Float32Array(65536)
  for (let h = 0; h < 65536; h++) {
    const sign = (h & 0x8000) !== 0 ? -1 : 1
    const exp = (h >>> 10) & 0x1f
    const mant = h & 0x3ff
    halfTable[h] = exp === 0
      ? sign * mant * 2 ** -24
      : exp === 31 ? (mant !== 0 ? Number.NaN : sign * Infinity) : sign * (1024 + mant) * 2 ** (exp - 25)
  }
  return halfTable
}

export function halfToFloat (h: number): number {
  return halfToFloatTable()[h & 0xffff]
}

/** float32 bits → float16 bits, round-to-nearest-even; overflow gives infinity, NaN stays a (quiet) NaN. */
export function floatBitsToHalf (x: number): number {
  const sign = (x >>> 16) & 0x8000
  const exp = (x >>> 23) & 0xff
  const mant = x & 0x7fffff
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 | (mant >>> 13) : 0)
  const e = exp - 112 // float16's biased exponent
  if (e >= 31) return sign | 0x7c00
  if (e <= 0) {
    // Subnormal half: value = m × 2^-24, so m = (1.mant × 2^23) >> (14 - e), rounded.
    const shift = 14 - e
    if (shift > 24) return sign
    const full = mant | 0x800000
    let q = full >>> shift
    const rem = full & ((1 << shift) - 1)
    const half = 1 << (shift - 1)
    if (rem > half || (rem === half && (q & 1) !== 0)) q++
    return sign | q // q may reach 0x400: the smallest normal, which is right
  }
  let q = (e << 10) | (mant >>> 13)
  const rem = mant & 0x1fff
  if (rem > 0x1000 || (rem === 0x1000 && (q & 1) !== 0)) q++ // a carry into the exponent is right, up to infinity
  return sign | q
}

/** float32 bits → bfloat16 bits (the upper half), round-to-nearest-even; NaN stays a quiet NaN. */
export function floatBitsToBfloat (x: number): number {
  if ((x & 0x7f800000) === 0x7f800000 && (x & 0x7fffff) !== 0) return ((x >>> 16) | 0x40) & 0xffff
  return Math.floor(((x >>> 0) + 0x7fff + ((x >>> 16) & 1)) / 65536) & 0xffff
}

/** Widens n stored values (`src`, 16-bit items) into dst[at..at+n). float32 needs no conversion and never comes here. */
export function widen (dtype: 'float16' | 'bfloat16', src: Uint16Array, dst: Float32Array, at: number): void {
  const n = src.length
  if (dtype === 'float16') {
    const table = halfToFloatTable()
    for (let i = 0; i < n; i++) dst[at + i] = table[src[i]]
  } else {
    const bits = new Uint32Array(dst.buffer, dst.byteOffset + at * 4, n)
    for (let i = 0; i < n; i++) bits[i] = src[i] << 16
  }
}

/** Narrows src[at..at+dst.length) into dst, round-to-nearest-even. */
export function narrow (dtype: 'float16' | 'bfloat16', src: Float32Array, at: number, dst: Uint16Array): void {
  const bits = new Uint32Array(src.buffer, src.byteOffset + at * 4, dst.length)
  const convert = dtype === 'float16' ? floatBitsToHalf : floatBitsToBfloat
  for (let i = 0; i < dst.length; i++) dst[i] = convert(bits[i])
}

/** Index of the first stored 16-bit value whose exponent is all ones (infinity or NaN), or -1; no widening needed. */
export function firstNonFinite16 (dtype: 'float16' | 'bfloat16', src: Uint16Array): number {
  const mask = dtype === 'float16' ? 0x7c00 : 0x7f80
  for (let i = 0; i < src.length; i++) if ((src[i] & mask) === mask) return i
  return -1
}
