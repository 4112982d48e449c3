import { test } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { parsePrometheusText, sumOf } from '../../../operator/controller/prom-text.js'
import { pickPreferring, summarize, ProgressTracker } from '../../../operator/controller/progress.js'

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

const checkpointMetrics = (o: { round?: number, unix?: number, failed?: number, completed?: 0 | 1 }) => [
  '# TYPE averaging_rounds_total counter', 'averaging_rounds_total{swarm="demo",outcome="success"} 10',
  ...(o.round === undefined ? [] : [`averaging_checkpoint_round{swarm="demo"} ${o.round}`]),
  ...(o.unix === undefined ? [] : [`averaging_checkpoint_timestamp_seconds{swarm="demo"} ${o.unix}`]),
  ...(o.failed === undefined ? [] : [`averaging_checkpoint_writes_total{swarm="demo",outcome="written"} 4`, `averaging_checkpoint_writes_total{swarm="demo",outcome="failed"} ${o.failed}`]),
  ...(o.completed === undefined ? [] : [`averaging_completed{swarm="demo"} ${o.completed}`])
].join('\n') + '\n'

test('summarize: the newest checkpoint any agent reports (with that round\'s latest time) and how many agents completed', () => {
  const s = summarize([checkpointMetrics({ round: 100, unix: 1700000000, completed: 1 }), checkpointMetrics({ round: 200, unix: 1700000300, completed: 0 }), checkpointMetrics({ round: 200, unix: 1700000301 }), checkpointMetrics({ round: 0 })])
  assert.deepEqual(s?.checkpoint, { round: 200, unix: 1700000301 })
  assert.equal(s?.completedAgents, 1)
  assert.equal(summarize([checkpointMetrics({ round: 0 })])?.checkpoint, undefined, 'round 0: no checkpoint yet')
})

test('the tracker: completion counted per pod across sampled scrapes, checkpoint failures against a baseline, cleared by a newer checkpoint', async () => {
  // 40 agents, 8 scraped per interval; each reports what `state` says for its IP.
  const state = new Map<string, { round: number, failed: number, completed: 0 | 1 }>()
  const targets = Array.from({ length: 40 }, (_, i) => ({ ip: `10.0.0.${i + 1}`, port: 9400, id: `uid-${i}` }))
  for (const t of targets) state.set(t.ip, { round: 100, failed: 2, completed: 0 })
  const fetched: string[] = []
  const fetcher = async (url: string) => { const ip = new URL(url).hostname; fetched.push(ip); const s = state.get(ip)!; return checkpointMetrics({ round: s.round, unix: 1700000000 + s.round, failed: s.failed, completed: s.completed }) }
  let queued = 0
  const t = new ProgressTracker(() => { queued++ }, fetcher, { intervalMs: 60_000, sampleSize: 8, timeoutMs: 1000 })
  t.setTargets('ml/job', targets.slice(0, 8)) // all scraped each time, for the failure part
  await t.scrapeAll()
  let p = t.get('ml/job')!
  assert.equal(fetched.length, 8)
  assert.deepEqual(p.checkpoint, { round: 100, time: '2023-11-14T22:15:00Z' })
  assert.equal(p.checkpointFailing, false, 'failures from before the operator watched are a baseline, not news')
  assert.deepEqual(p.completion, { completed: 0, of: 8 })

  // One agent's failed counter grows: failing, until a newer checkpoint is durable.
  state.get('10.0.0.3')!.failed = 3
  await t.scrapeAll()
  p = t.get('ml/job')!
  assert.equal(p.checkpointFailing, true)
  assert.equal(p.checkpointFailures, 1)
  for (const s of state.values()) s.round = 200
  await t.scrapeAll()
  assert.equal(t.get('ml/job')!.checkpointFailing, false)
  assert.equal(t.get('ml/job')!.checkpoint?.round, 200)

  t.setTargets('ml/job', targets)
  assert.deepEqual(t.get('ml/job')!.completion, { completed: 0, of: 40 })
  // Every agent completes: the tracker reaches 40 of 40 in 40/8 = 5 scrapes, preferring agents not yet seen complete.
  for (const s of state.values()) s.completed = 1
  for (let i = 1; i <= 5; i++) {
    queued = 0
    await t.scrapeAll()
    assert.deepEqual(t.get('ml/job')!.completion, { completed: 8 * i, of: 40 }, `after ${i} scrapes`)
    assert.equal(queued, 1, 'a change in completion alone queues the swarm')
  }
  queued = 0
  await t.scrapeAll()
  assert.equal(queued, 0, 'nothing new: nothing queued')
  // A pod replaced (new uid) must report again; one seen reporting 0 (its agent restarted) is forgotten.
  t.setTargets('ml/job', [...targets.slice(1), { ...targets[0], id: 'uid-new' }])
  assert.deepEqual(t.get('ml/job')!.completion, { completed: 39, of: 40 })
  state.get('10.0.0.2')!.completed = 0
  t.setTargets('ml/job', targets.slice(1, 3))
  await t.scrapeAll()
  assert.deepEqual(t.get('ml/job')!.completion, { completed: 1, of: 2 })
})

test('pickPreferring takes the preferred ones first, then fills up at random', () => {
  const xs = Array.from({ length: 20 }, (_, i) => i)
  const a = pickPreferring(xs, 5, x => x % 10 === 0)
  assert.equal(a.length, 5)
  assert.deepEqual(a.slice(0, 2).sort((x, y) => x - y), [0, 10])
  assert.equal(new Set(a).size, 5)
})
