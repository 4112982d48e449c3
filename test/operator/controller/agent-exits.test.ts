/**
 * Why an agent exits reaches the swarm: the agent ends with one clean stderr line, its container
 * keeps it as the termination message (FallbackToLogsOnError), and the operator puts it in the
 * Degraded condition and an AgentExits event.
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { agentExits, deriveStatus, exitLine, type Observed } from '../../../operator/controller/status.js'
import { statusEvents } from '../../../operator/controller/events.js'
import type { KubeObj } from '../../../operator/objects.js'
import { desiredFor, find, swarm } from '../builders/fixture.js'

const NOW = '2026-11-22T04:00:00Z'
const LINE = 'agent configuration is invalid: AVS_ALLREDUCE_TIMEOUT: "0s" is not a duration from 1s to 24h (spec.averaging.allreduceTimeout)'

function crashing (name: string, message: string | undefined, extra: Record<string, unknown> = {}): KubeObj {
  return {
    apiVersion: 'v1', kind: 'Pod',
    metadata: { name, labels: { 'averaging.swarm.io/role': 'agent' } },
    status: {
      phase: 'Running',
      conditions: [{ type: 'Ready', status: 'False' }],
      containerStatuses: [{
        name: 'agent', restartCount: 3,
        state: { waiting: { reason: 'CrashLoopBackOff', message: 'back-off 40s restarting failed container=agent' } },
        lastState: { terminated: { exitCode: 2, reason: 'Error', ...(message === undefined ? {} : { message }) } },
        ...extra
      }]
    }
  }
}

const observed = (pods: KubeObj[]): Observed => ({ statefulSets: [], pods, bootstrapPeers: [] })
const degraded = (st: any) => st.conditions.find((c: any) => c.type === 'Degraded')

test('exitLine: the last meaningful line of a termination message, without stack frames or the Node banner', () => {
  assert.equal(exitLine(`{"level":30,"msg":"agent started"}\n${LINE}\n`), LINE)
  assert.equal(exitLine('file:///app/dist/agent/main.js:12\n    throw err\n    ^\n\nError: boom\n    at main (file:///app/dist/agent/main.js:12:11)\n    at node:internal/main:1:2\n\nNode.js v22.12.0\n'), 'Error: boom')
  assert.equal(exitLine('at most 3 peers may join'), 'at most 3 peers may join')
  assert.equal(exitLine(''), undefined)
  assert.equal(exitLine(undefined), undefined)
  assert.equal(exitLine('x'.repeat(1000))?.length, 300)
})

test('a crash-looping agent\'s exit line is in the Degraded message: "demo-agent-2 exits: ..."', () => {
  const st = deriveStatus(swarm({ replicas: 3, bootstrap: { replicas: 1 } }), observed([
    crashing('demo-agent-1', `${LINE}\n`), crashing('demo-agent-2', LINE), crashing('demo-bootstrap-0-0', undefined)
  ]), NOW)
  assert.equal(st.phase, 'Degraded')
  assert.equal(degraded(st).reason, 'AgentsFailing')
  assert.equal(degraded(st).message,
    `3 agent(s) cannot run: demo-agent-1 (CrashLoopBackOff), demo-agent-2 (CrashLoopBackOff), demo-bootstrap-0-0 (CrashLoopBackOff). demo-agent-1 exits: ${LINE}.`)
})

test('distinct exit lines are each named once; a pod without a message keeps the old sentence', () => {
  const other = 'agent failed: listen EADDRINUSE: address already in use 0.0.0.0:31337'
  const pods = [crashing('demo-agent-0', LINE), crashing('demo-agent-1', other), crashing('demo-agent-2', LINE)]
  assert.deepEqual(agentExits(pods), [{ pod: 'demo-agent-0', line: LINE }, { pod: 'demo-agent-1', line: other }])
  const st = deriveStatus(swarm({ replicas: 3, bootstrap: { replicas: 1 } }), observed(pods), NOW)
  assert.match(degraded(st).message, new RegExp(`demo-agent-0 exits: .*allreduceTimeout\\)\\. demo-agent-1 exits: agent failed: listen EADDRINUSE`))
  const plain = deriveStatus(swarm(), observed([crashing('demo-agent-3', undefined)]), NOW)
  assert.equal(degraded(plain).message, '1 agent(s) cannot run: demo-agent-3 (CrashLoopBackOff).')
})

test('an exit code 0 or a running agent contributes no exit line; the current terminated state counts too', () => {
  assert.deepEqual(agentExits([crashing('a', 'done', { lastState: { terminated: { exitCode: 0, message: 'done' } } })]), [])
  const now = crashing('b', undefined, { state: { terminated: { exitCode: 2, message: LINE } }, lastState: {} })
  ;(now as any).status.phase = 'Failed'
  assert.deepEqual(agentExits([now]), [{ pod: 'b', line: LINE }])
})

test('events: the Degraded event carries the exit line; a new exit line later gets its own AgentExits event, an old one none', () => {
  const s = swarm({ replicas: 3, bootstrap: { replicas: 1 } })
  const ready = deriveStatus(s, observed([]), NOW)
  const pods1 = [crashing('demo-agent-2', LINE)]
  const st1 = deriveStatus(s, observed(pods1), NOW)
  const e1 = statusEvents(s, ready, st1, agentExits(pods1))
  assert.deepEqual(e1.map(e => [e.type, e.reason]), [['Warning', 'AgentsFailing']])
  assert.match(e1[0].message, /demo-agent-2 exits: agent configuration is invalid: AVS_ALLREDUCE_TIMEOUT: "0s" is not a duration/)
  // The same line from another pod, still Degraded: nothing new to say.
  const pods2 = [crashing('demo-agent-2', LINE), crashing('demo-agent-1', LINE)]
  const st2 = deriveStatus(s, observed(pods2), NOW)
  assert.deepEqual(statusEvents(s, st1, st2, agentExits(pods2)), [])
  // A different line while Degraded: one AgentExits event.
  const other = 'agent failed: cannot read /etc/averaging-swarm/psk/swarm.key'
  const pods3 = [crashing('demo-agent-0', other)]
  const e3 = statusEvents(s, st2, deriveStatus(s, observed(pods3), NOW), agentExits(pods3))
  assert.deepEqual(e3.map(e => [e.type, e.reason, e.message]), [['Warning', 'AgentExits', `demo-agent-0 exits: ${other}`]])
})

test('the agent container keeps its log tail as termination message (FallbackToLogsOnError)', async () => {
  const d = await desiredFor(swarm({ replicas: 3, bootstrap: { replicas: 1 }, auxiliary: { replicas: 1 } }))
  for (const set of ['demo-bootstrap-0', 'demo-agent', 'demo-aux']) {
    const agent = find(d.objects, 'StatefulSet', set).spec.template.spec.containers.find((c: any) => c.name === 'agent')
    assert.equal(agent.terminationMessagePolicy, 'FallbackToLogsOnError', set)
  }
})

test('the agent prints an invalid configuration as one last stderr line naming field and variable, and exits 2', () => {
  const r = spawnSync(process.execPath, ['dist/agent-bundle/main.js'], {
    env: { PATH: process.env.PATH, AVS_SWARM: 'demo', AVS_POD_NAME: 'demo-agent-2', AVS_PREFIX: 'ml_demo', AVS_ALLREDUCE_TIMEOUT: '0s', AVS_MIN_GROUP_SIZE: '1' },
    encoding: 'utf8', timeout: 60_000
  })
  assert.equal(r.status, 2, r.stderr)
  const lines = r.stderr.split('\n').filter(l => l !== '')
  assert.equal(lines.length, 1, r.stderr)
  assert.match(lines[0], /^agent configuration is invalid: AVS_MIN_GROUP_SIZE: "1" is not an integer from 2 to 256 \(spec\.averaging\.minGroupSize\); AVS_ALLREDUCE_TIMEOUT: "0s" is not a duration from 1s to 24h \(spec\.averaging\.allreduceTimeout\)$/)
  assert.equal(exitLine(r.stderr), lines[0])
})
