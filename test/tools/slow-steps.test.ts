import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'

// tools/faults/slow-steps.py on a small chaos run folder written here: two agents, one freeze.
// It reads files a chaos run leaves, so its figures can be checked by hand.

const run = promisify(execFile)
const T0 = Date.parse('2026-12-04T14:05:50.738Z')

test('slow-steps.py: the survivors\' matchmaking over the quiet median per fault kind, and their slow steps by what their logs say', async () => {
  const root = mkdtempSync(join(tmpdir(), 'slow-steps-'))
  try {
    const dir = join(root, 'chaos-2026-12-04T14-05-50-738Z')
    mkdirSync(dir)
    const step = (agent: number, atS: number, mmMs: number, peers = ['AAAAAA', 'BBBBBB'], groupId?: string): string => JSON.stringify({
      agent, incarnation: 1, attempt: 1, startedAt: T0 + atS * 1000, wallMs: mmMs + 20, averaged: true, groupSize: peers.length, groupId,
      peers, matchmakingMs: mmMs, allreduceMs: 20, partsKeptLocal: 0, unreachedPeers: [], nonFinite: false
    })
    // Quiet steps (matchmaking 500 ms) before the fault at 40 s; agent 1's two slow steps after it. A
    // third peer in one group of each tells which index each log is (the only id in all its groups).
    // Agents 2 and 3 (no logs) form a group as agents 0 and 1 form theirs (a wave), and one more alone at 70 s.
    const steps = [step(0, 1, 500, ['AAAAAA', 'CCCCCC']), step(1, 2, 500, ['BBBBBB', 'CCCCCC']), step(0, 5, 500), step(1, 41, 2500), step(1, 46, 3500), step(0, 60, 500, undefined, 'g60'), step(1, 61, 500, undefined, 'g60'),
      step(2, 60.7, 500, ['DDDDDD', 'EEEEEE'], 'g61'), step(3, 60.7, 500, ['DDDDDD', 'EEEEEE'], 'g61'), step(2, 70, 500, ['DDDDDD', 'EEEEEE'], 'g70'), step(3, 70, 500, ['DDDDDD', 'EEEEEE'], 'g70')]
    writeFileSync(join(dir, 'steps.jsonl'), steps.join('\n') + '\n')
    const log = (peerId: string, lines: Array<[number, string]>): string => [
      JSON.stringify({ time: T0, peerId: `12D3KooW${peerId}`, msg: 'agent started' }),
      ...lines.map(([s, msg]) => JSON.stringify({ time: T0 + s * 1000, msg }))
    ].join('\n') + '\n'
    writeFileSync(join(dir, 'chaos-agent-0.log'), log('AAAAAA', []))
    writeFileSync(join(dir, 'chaos-agent-1.log'), log('BBBBBB', [
      [41.5, '2 of 4 under default_chaos.0b0, short of a quorum: taking our group under the leftover key to meet other short groups; looking under default_chaos.0b'],
      [47, 'declared exp 1796393285.036, sees 1'],
      [48, 'assembled 3 of 4 at the expiration under default_chaos.0b; not early for the arrival cutoff, 3.00 s after declaring'],
      [52, 'assembled 3 of 4 at the expiration under default_chaos.0b; not early for the arrival cutoff, 2.75 s after declaring'],
      [56, 'assembled 2 of 4 at the expiration under default_chaos.0b01; not early for a second look for extras due']
    ]))
    const output = join(root, 'chaos.out')
    writeFileSync(output, '  40.0s SIGSTOP chaos-agent-0 during its step 3 for 5000 ms\n  45.0s SIGCONT chaos-agent-0\n')
    const { stdout } = await run('python3', ['tools/faults/slow-steps.py', dir, output])
    assert.match(stdout, /^11 steps, 11 averaged, 1 faults; matchmaking median 500 ms over 9 steps/m)
    assert.match(stdout, /^SIGSTOP: 1 faults, .* 5\.0 s \(5\.0 s a fault\)$/m, '2000 + 3000 ms over the median, the victim\'s own steps left out')
    assert.match(stdout, /went to or waited under the leftover key\s+1 steps\s+2\.5 s/)
    assert.match(stdout, /no move: waited for arrivals or the expiration\s+1 steps\s+3\.5 s/)
    // The group of 60 s: agent 0 waited 1 s for agent 1, then both 0.5 s until it formed at 61.5 s; the other two
    // groups 0.5 s each after their members came together.
    assert.match(stdout, /groups of 2:\s+3 groups\s+6 member-steps; waiting for their last member\s+1\.0 s, after it until formed\s+3\.0 s$/m)
    // g60 (formed 61.5 s) and g61 (61.2 s) in one wave, g70 alone, all three in the window 60-90 s after the first step (1 s).
    assert.match(stdout, /^groups formed within 0\.5 s of a group of other agents \(in waves\): 2 of 3 \(67 %\); per 30 s from its first step: 60:2\/3$/m)
    // Short groups at their expiration by what held them: sizes, keys and reasons, seconds left out.
    assert.match(stdout, /^\s+2\s+3 of 4 under leftover key: the arrival cutoff, N s after declaring$/m)
    assert.match(stdout, /^\s+1\s+2 of 4 under its grid key: a second look for extras due$/m)
  } finally {
    rmSync(root, { recursive: true, force: true })
  }
})

test('slow-steps.py refuses a folder that is not a chaos run, in one sentence', async () => {
  await assert.rejects(run('python3', ['tools/faults/slow-steps.py', '/tmp', '/dev/null']), (err: { stderr: string }) => {
    assert.match(err.stderr, /^\/tmp is not a chaos run folder/)
    assert.doesNotMatch(err.stderr, /Traceback/)
    return true
  })
})
