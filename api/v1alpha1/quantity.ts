/**
 * Kubernetes resource quantities ("500m", "2Gi", "1e3") as exact fractions, for the local twins of
 * the CRD's CEL rules on requests and limits (spec-rules.ts): Kubernetes compares them exactly, and so
 * must the twins, or a value with 20 digits reads equal here and larger there.
 */
const QUANTITY = /^([+-]?)([0-9]+)?(?:\.([0-9]*))?(?:([KMGTPE]i|[numkMGTPE])|[eE]([+-]?[0-9]+))?$/
const DECIMAL: Record<string, number> = { n: -9, u: -6, m: -3, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 }
const BINARY: Record<string, number> = { Ki: 10, Mi: 20, Gi: 30, Ti: 40, Pi: 50, Ei: 60 }

/** num / den, den > 0. */
export interface Quantity { readonly num: bigint, readonly den: bigint }

export function parseQuantity (v: unknown): Quantity | undefined {
  if (typeof v === 'number') return Number.isSafeInteger(v) ? { num: BigInt(v), den: 1n } : undefined
  if (typeof v !== 'string') return undefined
  const m = QUANTITY.exec(v)
  if (m === null || (m[2] === undefined && (m[3] === undefined || m[3] === ''))) return undefined
  const [, sign, whole = '', fraction = '', suffix, exponent] = m
  if (exponent !== undefined && exponent.replace(/^[+-]/, '').length > 4) return undefined
  let num = BigInt(whole + fraction === '' ? '0' : whole + fraction)
  let den = 10n ** BigInt(fraction.length)
  const ten = suffix !== undefined ? (DECIMAL[suffix] ?? 0) : exponent !== undefined ? Number(exponent) : 0
  if (ten > 0) num *= 10n ** BigInt(ten)
  if (ten < 0) den *= 10n ** BigInt(-ten)
  if (suffix !== undefined && suffix in BINARY) num *= 2n ** BigInt(BINARY[suffix])
  return { num: sign === '-' ? -num : num, den }
}

/** a − b's sign: -1, 0 or 1. */
export function compareQuantities (a: Quantity, b: Quantity): number {
  const d = a.num * b.den - b.num * a.den
  return d < 0n ? -1 : d > 0n ? 1 : 0
}
