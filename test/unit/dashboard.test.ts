/**
 * dashboards/averaging-swarm.json is what dashboards/averaging-swarm.ts generates (nobody edits it
 * by hand), names only metrics that api/metric-names.ts declares and agent/metrics/agent-metrics.ts
 * and operator/metrics.ts define, with labels those metrics carry, and has a panel for every metric an operator watches.
 */
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { collectDefaultMetrics, Registry } from 'prom-client'
import { AgentMetrics } from '../../agent/metrics/agent-metrics.js'
import { OperatorMetrics } from '../../operator/metrics.js'
import { AGENT_DEFAULT_LABELS, AGENT_METRICS, ALL_METRICS, OPERATOR_METRICS, type MetricDef } from '../../api/metric-names.js'
import { DASHBOARD_FILE, buildDashboard, renderDashboardJson } from '../../dashboards/averaging-swarm.js'
import { dashboardQueries, metricRefs } from './dashboard-metrics.js'

const dashboard = JSON.parse(readFileSync(DASHBOARD_FILE, 'utf8'))
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

describe('api/metric-names.ts is what the agent and the operator register', () => {
  for (const [who, registry, contract] of [
    ['agent', new AgentMetrics('s').registry, AGENT_METRICS],
    ['operator', new OperatorMetrics().registry, OPERATOR_METRICS]
  ] as const) {
    test(`${who}: every metric it registers (besides the process defaults) is declared, with its type and labels`, async () => {
      const defaults = new Registry()
      collectDefaultMetrics({ register: defaults })
      const own = new Set((await defaults.getMetricsAsJSON()).map(m => m.name))
      const registered = new Map((await registry.getMetricsAsJSON()).filter(m => !own.has(m.name)).map(m => [m.name, m]))
      const declared = new Map(Object.values(contract).map((d: MetricDef) => [d.name, d]))
      assert.deepEqual([...registered.keys()].sort(), [...declared.keys()].sort())
      for (const [name, d] of declared) {
        assert.equal(String(registered.get(name)!.type), d.type, `${name}'s type`)
        const labels = (registry.getSingleMetric(name) as unknown as { labelNames?: string[] }).labelNames ?? []
        assert.deepEqual([...labels].sort(), [...d.labels].sort(), `${name}'s labels`)
        assert.deepEqual(d.defaultLabels, who === 'agent' ? AGENT_DEFAULT_LABELS : [], `${name}'s default labels`)
      }
    })
  }

  test('no name is declared twice', () => {
    const names = ALL_METRICS.map(m => m.name)
    assert.equal(new Set(names).size, names.length)
  })
})

describe('the Grafana dashboard', () => {
  test(`${DASHBOARD_FILE} is the generated one (npm run generate:dashboard; do not edit it by hand)`, () => {
    assert.equal(readFileSync(DASHBOARD_FILE, 'utf8'), renderDashboardJson(), `${DASHBOARD_FILE} is stale or was edited: run npm run generate:dashboard and commit it`)
    assert.deepEqual(dashboard, buildDashboard())
  })

  test('every query names only metrics api/metric-names.ts declares (histograms by _bucket, _sum, _count)', () => {
    const declared = new Set(ALL_METRICS.flatMap(m => m.type === 'histogram' ? ['bucket', 'sum', 'count'].map(p => `${m.name}_${p}`) : [m.name]))
    const unknown = dashboardQueries(dashboard).flatMap(q => metricRefs(q.expr).filter(r => !declared.has(r.name)).map(r => `${q.where}: ${r.name}`))
    assert.deepEqual(unknown, [])
  })

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

  test('has a panel for every metric an operator watches', () => {
    const used = new Set(dashboardQueries(dashboard).flatMap(q => metricRefs(q.expr).map(r => r.name)))
    for (const m of ['averaging_rounds_total', 'averaging_matchmaking_duration_seconds_bucket', 'averaging_allreduce_duration_seconds_bucket',
      'averaging_group_size_sum', 'averaging_sent_bytes_total', 'averaging_received_bytes_total', 'averaging_peers_connected',
      'averaging_parameter_divergence', 'averaging_training_loss', 'averaging_state_downloads_total',
      'controller_runtime_reconcile_total', 'controller_runtime_reconcile_errors_total',
      'averaging_trainer_loss', 'averaging_trainer_samples_total', 'averaging_params_hash',
      'averaging_checkpoint_round', 'averaging_checkpoint_write_duration_seconds_bucket', 'averaging_checkpoint_writes_total',
      'averaging_sender_cutoffs_total', 'averaging_declared_bandwidth_bytes_per_second', 'averaging_codec_rounds_total']) assert.ok(used.has(m), `a panel uses ${m}`)
    const ids = dashboard.panels.map((p: { id: number }) => p.id)
    assert.equal(new Set(ids).size, ids.length, 'panel ids are unique')
    assert.equal(dashboard.uid, 'averaging-swarm')
    assert.equal(dashboard.title, 'AveragingSwarm')
    const trainer = dashboard.panels.find((p: { title: string }) => p.title === 'Trainer loss and parameter hash')
    assert.ok(trainer !== undefined, 'the trainer panel')
    assert.deepEqual(trainer.targets.map((t: { expr: string }) => metricRefs(t.expr).map(r => r.name)), [['averaging_trainer_loss'], ['averaging_trainer_samples_total'], ['averaging_params_hash']])
  })
})
