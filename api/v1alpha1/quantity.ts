/**
 * Kubernetes resource quantities ("500m", "2Gi", "1e3") as numbers, for the local twins of the CRD's
 * CEL rules on requests and limits (spec-rules.ts). Undefined for what Kubernetes does not parse.
 */
const QUANTITY = /^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:([KMGTPE]i|[numkMGTPE])|[eE]([+-]?[0-9]+))?$/
const FACTORS: Record<string, number> = {
  n: 1e-9, u: 1e-6, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
  Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60
}

export function parseQuantity (v: unknown): number | undefined {
  if (typeof v === 'number') return Number.isFinite(v) ? v : undefined
  if (typeof v !== 'string') return undefined
  const m = QUANTITY.exec(v)
  if (m === null) return undefined
  const [, sign, digits, suffix, exponent] = m
  const n = Number(digits) * (suffix !== undefined ? FACTORS[suffix] : exponent !== undefined ? 10 ** Number(exponent) : 1)
  return sign === '-' ? -n : n
}
