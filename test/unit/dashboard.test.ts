/**
 * dashboards/averaging-swarm.json names only metrics that agent/metrics/agent-metrics.ts and
 * operator/metrics.ts define, with labels those metrics carry, and covers what the issue asks.
 */
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import type { Registry } from 'prom-client'
import { AgentMetrics } from '../../agent/metrics/agent-metrics.js'
import { OperatorMetrics } from '../../operator/metrics.js'
import { dashboardQueries, metricRefs } from './dashboard-metrics.js'

const dashboard = JSON.parse(readFileSync('dashboards/averaging-swarm.json', 'utf8'))
/** Labels Prometheus adds at scrape time (the chart's PodMonitor sets namespace). */
const SCRAPE_LABELS = ['namespace', 'pod', 'instance', 'job']

/** name (with _bucket/_sum/_count for histograms) → label names it can carry. */
async function defined (registry: Registry, defaultLabels: string[]): Promise<Map<string, Set<string>>> {
  const out = new Map<string, Set<string>>()
  for (const m of await registry.getMetricsAsJSON()) {
    const labels = new Set([...((registry.getSingleMetric(m.name) as unknown as { labelNames?: string[] }).labelNames ?? []), ...defaultLabels, ...SCRAPE_LABELS])
    if (String(m.type) === 'histogram') {
      out.set(`${m.name}_bucket`, new Set([...labels, 'le']))
      out.set(`${m.name}_sum`, labels)
      out.set(`${m.name}_count`, labels)
    } else out.set(m.name, labels)
  }
  return out
}

describe('metricRefs (PromQL metric names)', () => {
  test('finds metrics and matcher labels, not functions, grouping labels, numbers or strings', () => {
    assert.deepEqual(metricRefs('histogram_quantile(0.95, sum by (le) (rate(x_bucket{a=~"$a", b!="q{z}"}[$__rate_interval])))'), [{ name: 'x_bucket', labels: ['a', 'b'] }])
    assert.deepEqual(metricRefs('sum(rate(a_total[5m])) / sum(rate(b_total{c="d"}[5m])) or vector(0)'), [{ name: 'a_total', labels: [] }, { name: 'b_total', labels: ['c'] }])
    assert.deepEqual(metricRefs('label_values(up{job="x"}, namespace)'), [{ name: 'up', labels: ['job'] }])
    assert.deepEqual(metricRefs('sum by (swarm, phase) (p{n="1"} == 1)'), [{ name: 'p', labels: ['n'] }])
  })
})

describe('the Grafana dashboard', () => {
  test('every query of every panel and variable names only metrics and labels the code defines', async () => {
    const agent = await defined(new AgentMetrics('s').registry, ['swarm'])
    const operator = await defined(new OperatorMetrics().registry, [])
    const queries = dashboardQueries(dashboard)
    assert.ok(queries.length >= 20, `${queries.length} queries`)
    const wrong: string[] = []
    for (const { where, expr } of queries) {
      const refs = metricRefs(expr)
      if (refs.length === 0) wrong.push(`${where}: names no metric: ${expr}`)
      for (const r of refs) {
        const labels = agent.get(r.name) ?? operator.get(r.name)
        if (labels === undefined) { wrong.push(`${where}: ${r.name} is not defined by the agent or the operator`); continue }
        for (const l of r.labels) if (!labels.has(l)) wrong.push(`${where}: ${r.name} has no label ${l}`)
      }
    }
    assert.deepEqual(wrong, [])
  })

  test('has namespace and swarm variables that every swarm panel filters by', () => {
    const names = dashboard.templating.list.map((v: { name: string }) => v.name)
    assert.ok(names.includes('namespace') && names.includes('swarm'))
    for (const { where, expr } of dashboardQueries(dashboard)) {
      if (!/averaging_|averagingswarm_/.test(expr) || where.startsWith('variable')) continue
      assert.match(expr, /namespace=~"\$namespace", swarm=~"\$swarm"/, `${where} filters by the variables`)
    }
  })

  test('covers what the issue asks for', () => {
    const used = new Set(dashboardQueries(dashboard).flatMap(q => metricRefs(q.expr).map(r => r.name)))
    for (const m of ['averaging_rounds_total', 'averaging_matchmaking_duration_seconds_bucket', 'averaging_allreduce_duration_seconds_bucket',
      'averaging_group_size_sum', 'averaging_sent_bytes_total', 'averaging_received_bytes_total', 'averaging_peers_connected',
      'averaging_parameter_divergence', 'averaging_training_loss', 'averaging_state_downloads_total',
      'controller_runtime_reconcile_total', 'controller_runtime_reconcile_errors_total']) assert.ok(used.has(m), `a panel uses ${m}`)
    const ids = dashboard.panels.map((p: { id: number }) => p.id)
    assert.equal(new Set(ids).size, ids.length, 'panel ids are unique')
    assert.equal(dashboard.uid, 'averaging-swarm')
  })
})
