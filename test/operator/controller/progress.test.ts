import { test } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { parsePrometheusText, sumOf } from '../../../operator/controller/prom-text.js'
import { summarize, ProgressTracker } from '../../../operator/controller/progress.js'

const agentMetrics = (rounds: number, failed: number, sizes: number[]) => `# HELP averaging_rounds_total Rounds by outcome.
# TYPE averaging_rounds_total counter
averaging_rounds_total{swarm="demo",outcome="success"} ${rounds}
averaging_rounds_total{swarm="demo",outcome="timeout"} ${failed}
# TYPE averaging_group_size histogram
averaging_group_size_bucket{swarm="demo",le="2"} 0
averaging_group_size_bucket{swarm="demo",le="+Inf"} ${sizes.length}
averaging_group_size_sum{swarm="demo"} ${sizes.reduce((a, b) => a + b, 0)}
averaging_group_size_count{swarm="demo"} ${sizes.length}
process_start_time_seconds 1.7e9
`

test('the Prometheus text parser reads labels with escapes, +Inf and exponents', () => {
  const s = parsePrometheusText('m{a="x\\"y",b="2"} 3 1700000000\nn +Inf\nbad line here\nk 1e3\n')
  assert.deepEqual(s, [{ name: 'm', labels: { a: 'x"y', b: '2' }, value: 3 }, { name: 'n', labels: {}, value: Infinity }, { name: 'k', labels: {}, value: 1000 }])
  assert.equal(sumOf(parsePrometheusText(agentMetrics(5, 2, [4])), 'averaging_rounds_total', { outcome: 'success' }), 5)
})

test('progress is the most rounds one agent completed and the mean group size over all agents', () => {
  assert.deepEqual(summarize([agentMetrics(5, 1, [4, 4]), agentMetrics(7, 0, [2])]), { roundsCompleted: 7, meanGroupSize: 10 / 3 })
  assert.equal(summarize(['process_start_time_seconds 1']), undefined, 'no averaging metric, no progress')
  const withTime = summarize([agentMetrics(1, 0, [2]) + 'averaging_last_round_timestamp_seconds{swarm="demo"} 1700000000\n', agentMetrics(2, 0, [2]) + 'averaging_last_round_timestamp_seconds{swarm="demo"} 1700000100.5\n'])
  assert.equal(withTime?.lastRoundUnix, 1700000100.5, 'the latest round any agent reports')
})

test('the tracker scrapes real HTTP endpoints, notes when rounds grew and queues the swarm', async () => {
  let rounds = 3
  const server = http.createServer((_, res) => { res.end(agentMetrics(rounds, 0, [4])) })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  const queued: string[] = []
  let now = new Date('2026-01-01T00:00:00Z')
  const t = new ProgressTracker(k => queued.push(k), undefined, { intervalMs: 60_000, sampleSize: 8, timeoutMs: 1000 }, () => now)
  t.setTargets('ml/demo', [{ ip: '127.0.0.1', port }, { ip: '127.0.0.1', port: 1 }])
  await t.scrapeAll()
  assert.deepEqual(t.get('ml/demo'), { roundsCompleted: 3, meanGroupSize: 4, lastRoundTime: '2026-01-01T00:00:00Z' })
  await t.scrapeAll()
  assert.deepEqual(queued, ['ml/demo'], 'unchanged numbers queue nothing')
  rounds = 5; now = new Date('2026-01-01T00:01:00Z')
  await t.scrapeAll()
  assert.equal(t.get('ml/demo')?.lastRoundTime, '2026-01-01T00:01:00Z')
  assert.deepEqual(queued, ['ml/demo', 'ml/demo'])
  server.close()
})
