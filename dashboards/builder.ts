/**
 * A small typed builder for the Grafana dashboard JSON we ship (schemaVersion 39, Prometheus
 * time series panels, query variables) and for the PromQL in it. Queries name metrics only through
 * api/metric-names.ts entries: `rate()` takes counters (or a histogram's parts), label matchers
 * take the labels a metric carries, so a renamed metric or label is a compile error here.
 *
 * Deliberately not @grafana/grafana-foundation-sdk: for 15 panels it would add 6 MB / 1,800 files
 * of CommonJS, a 0.0.x API whose v1 DashboardBuilder is already deprecated, and its own defaults
 * (schemaVersion 42 and fields this dashboard never set).
 */
import type { CounterDef, GaugeDef, HistogramDef, MetricDef } from '../api/metric-names.js'

// ---------- PromQL ----------

/** Labels Prometheus adds at scrape time (the chart's PodMonitor/ServiceMonitor set namespace and pod). */
export type ScrapeLabel = 'namespace' | 'pod' | 'instance' | 'job'
type LabelsOf<M> = M extends MetricDef<any, infer L, infer D> ? L | D : never
/** A label value: a string matches exactly (`=`), `{ re }` as a regular expression (`=~`). */
export type Matcher = string | { readonly re: string }
export type Matchers<M extends MetricDef> = Partial<Record<LabelsOf<M> | ScrapeLabel, Matcher>>

declare const kind: unique symbol
/** A series selector as PromQL text, branded with what it selects (rate() wants counters). */
export type Series<K extends 'counter' | 'gauge'> = string & { readonly [kind]: K }

function selector (name: string, matchers: Record<string, Matcher | undefined>): string {
  const parts = Object.entries(matchers).filter((e): e is [string, Matcher] => e[1] !== undefined)
    .map(([label, m]) => typeof m === 'string' ? `${label}=${JSON.stringify(m)}` : `${label}=~${JSON.stringify(m.re)}`)
  return parts.length === 0 ? name : `${name}{${parts.join(', ')}}`
}

/** A counter's or a gauge's series. */
export function series<M extends CounterDef | GaugeDef> (m: M, matchers: Matchers<M> = {}): Series<M['type']> {
  return selector(m.name, matchers) as Series<M['type']>
}

/** One of the series Prometheus exposes for a histogram: `_bucket` (with `le`), `_sum`, `_count` (all counters). */
export function histogramPart<M extends HistogramDef> (h: M, part: 'bucket' | 'sum' | 'count', matchers: Matchers<M> = {}): Series<'counter'> {
  return selector(`${h.name}_${part}`, matchers) as Series<'counter'>
}

export const RATE_INTERVAL = '$__rate_interval'
export const rate = (s: Series<'counter'>, window = RATE_INTERVAL): string => `rate(${s}[${window}])`
export const increase = (s: Series<'counter'>, window = RATE_INTERVAL): string => `increase(${s}[${window}])`

/** `histogram_quantile(q, sum by (le) (rate(h_bucket{...}[window])))` */
export function quantile<M extends HistogramDef> (q: number, h: M, matchers: Matchers<M> = {}): string {
  return `histogram_quantile(${q}, sum by (le) (${rate(histogramPart(h, 'bucket', matchers))}))`
}

/** `label_values(metric{...}, label)`, the Prometheus data source's variable query. */
export function labelValues<M extends MetricDef> (m: M, label: LabelsOf<M> | ScrapeLabel, matchers: Matchers<M> = {}): string {
  const name = m.type === 'histogram' ? `${m.name}_count` : m.name
  return `label_values(${selector(name, matchers)}, ${label})`
}

// ---------- Dashboard JSON ----------

export interface DataSourceRef { readonly type: 'prometheus', readonly uid: string }
/** The panels' data source: the dashboard's `datasource` variable. */
export const DATASOURCE: DataSourceRef = { type: 'prometheus', uid: '${datasource}' }

/** Grafana unit ids this dashboard uses. */
export type Unit = 'ops' | 'cps' | 's' | 'short' | 'none' | 'Bps' | 'percentunit'

export interface Target { refId: string, expr: string, legendFormat: string, datasource: DataSourceRef }
export interface OverrideProperty { id: 'unit' | 'decimals' | 'displayName' | 'custom.axisPlacement' | 'custom.axisLabel', value: string | number }
export interface FieldOverride { matcher: { id: 'byFrameRefID', options: string }, properties: OverrideProperty[] }
export interface GridPos { h: number, w: number, x: number, y: number }

export interface Panel {
  type: 'timeseries'
  title: string
  description: string
  datasource: DataSourceRef
  fieldConfig: { defaults: { unit: Unit }, overrides: FieldOverride[] }
  options: { legend: { displayMode: 'list', placement: 'bottom' }, tooltip: { mode: 'multi' } }
  targets: Target[]
  id: number
  gridPos: GridPos
}

export interface DatasourceVariable { name: string, label: string, type: 'datasource', query: 'prometheus', current: Record<string, never>, hide: 0 }
export interface QueryVariable {
  name: string
  label: string
  type: 'query'
  datasource: DataSourceRef
  query: { query: string, refId: string }
  definition: string
  refresh: 2
  includeAll: boolean
  multi: boolean
  allValue: string
  current: { selected: boolean, text: string[], value: string[] }
  sort: 1
}
export type Variable = DatasourceVariable | QueryVariable

export interface Dashboard {
  uid: string
  title: string
  tags: string[]
  description: string
  timezone: 'browser'
  schemaVersion: 39
  version: number
  editable: boolean
  refresh: string
  time: { from: string, to: string }
  templating: { list: Variable[] }
  annotations: { list: [] }
  panels: Panel[]
}

/** A query of a panel: its PromQL and legend; refIds are A, B, C... in order. */
export interface Query { expr: string, legend: string }

/** A time series panel; `overrides` are keyed by the refId of the query they restyle. */
export interface TimeseriesSpec {
  title: string
  description: string
  unit: Unit
  queries: Query[]
  overrides?: Record<string, OverrideProperty[]>
}

export function datasourceVariable (): DatasourceVariable {
  return { name: 'datasource', label: 'Data source', type: 'datasource', query: 'prometheus', current: {}, hide: 0 }
}

/** A multi-value query variable with "All" (`.*`) selected, refreshed on time range change. */
export function queryVariable (name: string, label: string, query: string): QueryVariable {
  return {
    name,
    label,
    type: 'query',
    datasource: DATASOURCE,
    query: { query, refId: name },
    definition: query,
    refresh: 2,
    includeAll: true,
    multi: true,
    allValue: '.*',
    current: { selected: true, text: ['All'], value: ['$__all'] },
    sort: 1
  }
}

const PANEL_H = 8
const PANEL_W = 12

/** Panels in two columns, 8 high, ids 1, 2, ... in order. */
function layout (specs: TimeseriesSpec[]): Panel[] {
  return specs.map((s, i) => {
    if (s.queries.length === 0) throw new Error(`panel "${s.title}" has no query`)
    const refIds = s.queries.map((_, j) => String.fromCharCode(65 + j))
    for (const ref of Object.keys(s.overrides ?? {})) if (!refIds.includes(ref)) throw new Error(`panel "${s.title}": override for ${ref}, which is no query`)
    return {
      type: 'timeseries',
      title: s.title,
      description: s.description,
      datasource: DATASOURCE,
      fieldConfig: {
        defaults: { unit: s.unit },
        overrides: Object.entries(s.overrides ?? {}).map(([ref, properties]) => ({ matcher: { id: 'byFrameRefID', options: ref }, properties }))
      },
      options: { legend: { displayMode: 'list', placement: 'bottom' }, tooltip: { mode: 'multi' } },
      targets: s.queries.map((q, j) => ({ refId: refIds[j], expr: q.expr, legendFormat: q.legend, datasource: DATASOURCE })),
      id: i + 1,
      gridPos: { h: PANEL_H, w: PANEL_W, x: (i % 2) * PANEL_W, y: Math.floor(i / 2) * PANEL_H }
    }
  })
}

export interface DashboardSpec {
  uid: string
  title: string
  tags: string[]
  description: string
  refresh: string
  time: { from: string, to: string }
  variables: Variable[]
  panels: TimeseriesSpec[]
}

export function dashboard (spec: DashboardSpec): Dashboard {
  const titles = spec.panels.map(p => p.title)
  const dup = titles.find((t, i) => titles.indexOf(t) !== i)
  if (dup !== undefined) throw new Error(`two panels are titled "${dup}"`)
  return {
    uid: spec.uid,
    title: spec.title,
    tags: spec.tags,
    description: spec.description,
    timezone: 'browser',
    schemaVersion: 39,
    version: 1,
    editable: true,
    refresh: spec.refresh,
    time: spec.time,
    templating: { list: spec.variables },
    annotations: { list: [] },
    panels: layout(spec.panels)
  }
}
