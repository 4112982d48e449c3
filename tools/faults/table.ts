/** A plain-text table with right-aligned columns, as the reliability scripts print them. */
export function formatTable (header: readonly string[], rows: ReadonlyArray<readonly string[]>): string {
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map(r => (r[c] ?? '').length)))
  const line = (cells: readonly string[]): string => cells.map((v, c) => v.padStart(widths[c])).join('  ')
  return [line(header), line(widths.map(w => '-'.repeat(w))), ...rows.map(line)].join('\n')
}

export function ms (v: number | undefined): string { return v === undefined || !Number.isFinite(v) ? '-' : `${(v / 1000).toFixed(1)} s` }
export function sci (v: number): string { return Number.isFinite(v) ? v.toExponential(2) : String(v) }
