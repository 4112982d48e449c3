import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { runChaos } from '../../tools/faults/chaos-run.js'

// Faults: a smaller chaos run than `npm run chaos` (6 real agent processes, one
// SIGKILL then restart, one SIGTERM (graceful leave) then restart, one SIGSTOP then SIGCONT, each
// aimed at an agent in the middle of a step). The agents run from the one-file bundle the agent image
// runs (AGENT_BUNDLE, scripts/bundle-agent.mjs), so restarts are tested as pods restart.
test('chaos: 6 agents of the image\'s bundle survive a SIGKILL+restart, a SIGTERM+restart and a SIGSTOP/SIGCONT mid-round', { timeout: 300_000 }, async () => {
  const outDir = mkdtempSync(join(tmpdir(), 'avs-chaos-'))
  // Faults hit only agents with 2 or more rounds left, and each kill or term waits for its victim's
  // restart (~5 s of rounds on a quiet machine): with 10 rounds the third fault found no agent left
  // to hit (clean-clone CI); 18 leave room for three.
  const rounds = 18
  const slackMs = 5000
  const r = await runChaos({
    agents: 6, bootstrap: 2, rounds, seed: 'test', elements: 16384, periodMs: 1000,
    timing: { targetGroupSize: 4, minGroupSize: 2, averagingExpiration: 3, requestTimeout: 1, allreduceTimeout: 10 },
    faults: ['kill', 'term', 'stop'], warmupLimitMs: 120_000, faultGapMs: 2000, freezeMs: 4000, restartDelayMs: 500,
    subnet: 1 + (process.pid % 200), slackMs, outDir, log: () => {}
  })
  const detail = `${JSON.stringify(r.faults)}\n${r.violations.join('\n')}\nlogs: ${outDir}`
  assert.equal(r.faults.length, 3, `every fault was injected\n${detail}`)
  for (const a of r.agents) {
    assert.ok(a.attempted >= rounds, `${a.name} attempted ${a.attempted} of ${rounds} rounds`)
    assert.ok(a.averaged > 0, `${a.name} averaged`)
    assert.equal(a.nonFinite, 0, `${a.name} never got a NaN back`)
  }
  for (const kind of ['kill', 'term'] as const) {
    const f = r.faults.find(f => f.kind === kind)!
    assert.equal(f.origin, 'peers', `the restarted ${kind} victim loaded the swarm's state from a peer\n${detail}`)
    assert.equal(f.loadedLogLine, true, `the restarted ${kind} victim logged loading the state`)
    assert.equal(f.bytesLost, 0)
    assert.ok(f.rejoinMs !== undefined, `the ${kind} victim's new process averaged\n${detail}`)
  }
  // SIGTERM: the agent finished the round under way and left by itself, well before the 30 s grace period.
  const term = r.faults.find(f => f.kind === 'term')!
  assert.ok(term.leaveMs !== undefined && term.leaveMs < 30_000, `left in ${term.leaveMs} ms\n${detail}`)
  for (const f of r.faults) assert.ok(f.recoverMs !== undefined, `the ${f.kind} victim averaged again\n${detail}`)
  assert.ok(r.maxStepMs <= r.stepBoundMs + slackMs, `slowest step ${r.maxStepMs} ms within ${r.stepBoundMs} + ${slackMs} ms`)
  assert.equal(r.spreadRises, 0, 'the spread between agents never rose')
  const first = r.spreadSeries[0].spread
  const last = r.spreadSeries.at(-1)!.spread
  assert.ok(last < first / 10, `the spread fell from ${first} to ${last}`)
  assert.deepEqual(r.violations, [])
})
