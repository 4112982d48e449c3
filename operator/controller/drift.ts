/**
 * Does an observed object already carry everything the operator wants? Used to skip server-side
 * apply at steady state, so a reconcile of an unchanged swarm sends no write at all. The check
 * is "desired is a subset of observed": fields the API server defaults are ignored, omitted
 * empty values count as equal, and resource quantities compare by value ("0.5" == "500m").
 */

const QUANTITY = /^([+-]?[0-9.]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$/
const FACTORS: Record<string, number> = {
  '': 1, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60
}

function quantity (v: unknown): number | undefined {
  const m = QUANTITY.exec(String(v))
  return m === null ? undefined : Number(m[1]) * FACTORS[m[2] ?? '']
}

function isEmpty (v: unknown): boolean {
  return v === undefined || v === null || v === '' || v === false || v === 0 ||
    (Array.isArray(v) && v.length === 0) || (typeof v === 'object' && v !== null && Object.keys(v).length === 0)
}

function scalarEqual (d: unknown, o: unknown): boolean {
  if (d === o || String(d) === String(o)) return true
  const qd = quantity(d); const qo = quantity(o)
  return qd !== undefined && qo !== undefined && Math.abs(qd - qo) <= 1e-9 * Math.max(1, Math.abs(qd))
}

/** Paths (a.b[2].c) where observed lacks or differs from desired; empty means nothing to apply. */
export function driftPaths (desired: unknown, observed: unknown, path = ''): string[] {
  if (observed === undefined || observed === null) return isEmpty(desired) ? [] : [path || '.']
  if (Array.isArray(desired)) {
    if (!Array.isArray(observed) || observed.length !== desired.length) return [path]
    return desired.flatMap((d, i) => driftPaths(d, observed[i], `${path}[${i}]`))
  }
  if (desired !== null && typeof desired === 'object') {
    if (typeof observed !== 'object' || Array.isArray(observed)) return [path]
    return Object.entries(desired).flatMap(([k, d]) => driftPaths(d, (observed as Record<string, unknown>)[k], path === '' ? k : `${path}.${k}`))
  }
  return scalarEqual(desired, observed) ? [] : [path]
}

export function needsApply (desired: unknown, observed: unknown): boolean {
  return observed === undefined || driftPaths(desired, observed).length > 0
}
