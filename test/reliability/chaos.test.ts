import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { runChaos } from '../../bench/lib/chaos-run.js'

// Issue 8, faults: a smaller chaos run than `npm run chaos` (6 real agent processes, one SIGKILL
// then restart, one SIGSTOP then SIGCONT, both aimed at agents in the middle of a step).
test('chaos: 6 agents survive a SIGKILL+restart and a SIGSTOP/SIGCONT mid-round', { timeout: 300_000 }, async () => {
  const outDir = mkdtempSync(join(tmpdir(), 'avs-chaos-'))
  const rounds = 10
  const slackMs = 5000
  const r = await runChaos({
    agents: 6, bootstrap: 2, rounds, seed: 'test', elements: 16384, periodMs: 1000,
    timing: { targetGroupSize: 4, minGroupSize: 2, averagingExpiration: 3, requestTimeout: 1, allreduceTimeout: 10 },
    faults: ['kill', 'stop'], warmupLimitMs: 120_000, faultGapMs: 2000, freezeMs: 4000, restartDelayMs: 500,
    subnet: 1 + (process.pid % 200), slackMs, outDir, log: () => {}
  })
  const detail = `${JSON.stringify(r.faults)}\n${r.violations.join('\n')}\nlogs: ${outDir}`
  assert.equal(r.faults.length, 2, `both faults were injected\n${detail}`)
  for (const a of r.agents) {
    assert.ok(a.attempted >= rounds, `${a.name} attempted ${a.attempted} of ${rounds} rounds`)
    assert.ok(a.averaged > 0, `${a.name} averaged`)
    assert.equal(a.nonFinite, 0, `${a.name} never got a NaN back`)
  }
  const kill = r.faults.find(f => f.kind === 'kill')!
  assert.equal(kill.origin, 'peers', `the restarted agent loaded the swarm's state from a peer\n${detail}`)
  assert.equal(kill.loadedLogLine, true, 'the restarted agent logged loading the state')
  assert.equal(kill.bytesLost, 0)
  for (const f of r.faults) assert.ok(f.recoverMs !== undefined, `the ${f.kind} victim averaged again\n${detail}`)
  assert.ok(r.maxStepMs <= r.stepBoundMs + slackMs, `slowest step ${r.maxStepMs} ms within ${r.stepBoundMs} + ${slackMs} ms`)
  assert.equal(r.spreadRises, 0, 'the spread between agents never rose')
  const first = r.spreadSeries[0].spread
  const last = r.spreadSeries.at(-1)!.spread
  assert.ok(last < first / 10, `the spread fell from ${first} to ${last}`)
  assert.deepEqual(r.violations, [])
})
