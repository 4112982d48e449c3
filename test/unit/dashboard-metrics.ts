/**
 * Metric names and label selectors in PromQL, as far as the dashboard needs: enough to check that
 * every query names metrics the code defines. Pure, unit-tested in dashboard.test.ts.
 */

export interface MetricRef { name: string, labels: string[] }

const KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'and', 'or', 'unless', 'offset'])

/** The metrics an expression selects, with the label names its matchers use. */
export function metricRefs (expr: string): MetricRef[] {
  const refs: MetricRef[] = []
  // label_values(metric{...}, label): the second argument is a label, not a metric.
  const e = expr.replace(/label_values\(([^,)]*)(,[^)]*)?\)/g, '($1)')
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\[[^\]]*\]/g, '')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ')
  const re = /([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?\s*(\()?/g
  for (const m of e.matchAll(re)) {
    const [, name, selector, call] = m
    if (call !== undefined && selector === undefined) continue // a function
    if (KEYWORDS.has(name)) continue
    if (m.index > 0 && /[0-9.]/.test(e[m.index - 1])) continue // 1e3, 0.95
    const labels = selector === undefined ? [] : [...selector.matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!=|!~|=)/g)].map(x => x[1])
    refs.push({ name, labels })
  }
  return refs
}

/** Every PromQL expression of a Grafana dashboard: panel targets and query variables. */
export function dashboardQueries (dashboard: any): Array<{ where: string, expr: string }> {
  const out: Array<{ where: string, expr: string }> = []
  for (const p of dashboard.panels ?? []) for (const t of p.targets ?? []) out.push({ where: `panel "${p.title}" ${t.refId}`, expr: t.expr })
  for (const v of dashboard.templating?.list ?? []) if (v.type === 'query') out.push({ where: `variable ${v.name}`, expr: typeof v.query === 'string' ? v.query : v.query.query })
  return out
}
