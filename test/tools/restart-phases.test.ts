import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'

// tools/faults/restart-phases.py on a small chaos run folder written here: one agent killed twice,
// so that its figures can be checked by hand.

const run = promisify(execFile)
const T0 = Date.parse('2026-12-04T16:48:05.581Z')

test('restart-phases.py: each restart\'s way back, phase by phase, and its first step\'s group', async () => {
  const root = mkdtempSync(join(tmpdir(), 'restart-phases-'))
  try {
    const dir = join(root, 'chaos-2026-12-04T16-48-05-581Z')
    mkdirSync(dir)
    const step = (agent: number, incarnation: number, atMs: number, wallMs: number, peers: string[], averaged = true): string => JSON.stringify({
      agent, incarnation, attempt: 1, startedAt: T0 + atMs, wallMs, averaged, groupSize: averaged ? peers.length : 0,
      peers, matchmakingMs: wallMs - 100, allreduceMs: 100, partsKeptLocal: 0, unreachedPeers: [], nonFinite: false
    })
    // Agent 0 (AAAAAA) restarted at 10 s (new id BBBBBB) and 20 s (CCCCCC); agents 1 (DDDDDD) and 2
    // (EEEEEE) run throughout. Each first process's groups share only its own id (which log is which index).
    writeFileSync(join(dir, 'steps.jsonl'), [
      step(0, 1, 1000, 500, ['AAAAAA', 'DDDDDD']), step(1, 1, 1000, 500, ['AAAAAA', 'DDDDDD']),
      step(0, 1, 3000, 500, ['AAAAAA', 'EEEEEE']), step(2, 1, 3000, 500, ['AAAAAA', 'EEEEEE']),
      step(1, 1, 5000, 500, ['DDDDDD', 'EEEEEE']), step(2, 1, 5000, 500, ['DDDDDD', 'EEEEEE']),
      step(0, 2, 11_000, 1000, ['BBBBBB', 'DDDDDD']), step(1, 1, 10_900, 1100, ['BBBBBB', 'DDDDDD']),
      step(0, 3, 21_000, 3000, [], false), step(0, 3, 24_500, 500, ['CCCCCC', 'DDDDDD', 'EEEEEE']), step(1, 1, 24_400, 600, ['CCCCCC', 'DDDDDD', 'EEEEEE'])
    ].join('\n') + '\n')
    const at = (ms: number): string => new Date(T0 + ms).toISOString()
    const line = (ms: number, msg: string, extra: Record<string, unknown> = {}): string => JSON.stringify({ level: 30, time: T0 + ms, ...extra, msg })
    const incarnation = (n: number, ms: number, peer: string, offsets: number[]): string[] => [
      `--- incarnation ${n} (pid ${100 + n}) at ${at(ms)}`,
      line(ms + offsets[0], 'agent started', { peerId: `12D3KooW${peer}` }),
      line(ms + offsets[1], 'connected to 2 of 2 bootstrap peers'),
      line(ms + offsets[2], 'sidecar trainer registered its tensors'),
      line(ms + offsets[3], 'routing table settled at 7 peers in 900 ms')
    ]
    writeFileSync(join(dir, 'chaos-agent-0.log'), [
      ...incarnation(1, 0, 'AAAAAA', [300, 400, 800, 1200]),
      ...incarnation(2, 10_000, 'BBBBBB', [300, 400, 900, 1500]),
      ...incarnation(3, 20_000, 'CCCCCC', [500, 600, 1100, 1700])
    ].join('\n') + '\n')
    writeFileSync(join(dir, 'chaos-agent-1.log'), incarnation(1, 0, 'DDDDDD', [300, 400, 800, 1200]).join('\n') + '\n')
    writeFileSync(join(dir, 'chaos-agent-2.log'), incarnation(1, 0, 'EEEEEE', [300, 400, 800, 1200]).join('\n') + '\n')
    const { stdout } = await run('python3', ['tools/faults/restart-phases.py', dir])
    assert.match(stdout, /^2 restarts;/m)
    assert.match(stdout, /^modules loaded, node started\s+2\s+400\s/m, 'medians of 300 and 500 ms after each spawn')
    assert.match(stdout, /^trainer registered\s+2\s+1000\s/m)
    assert.match(stdout, /^first step: done\s+2\s+3000\s/m, 'its first steps end 2.0 and 4.0 s after their spawns')
    assert.match(stdout, /^first averaged step: done\s+2\s+3500\s/m, 'the second restart\'s first step did not average: 2.0 and 5.0 s')
    assert.match(stdout, /first step's group: 1 of 2, 1 not averaged; its matchmaking median 1900 ms/)
  } finally {
    rmSync(root, { recursive: true, force: true })
  }
})

test('restart-phases.py refuses a folder that is not a chaos run, in one sentence', async () => {
  await assert.rejects(run('python3', ['tools/faults/restart-phases.py', tmpdir()]), (err: { stderr: string }) => {
    assert.match(err.stderr, /is not a chaos run folder \(it has no steps\.jsonl\)$/m)
    assert.doesNotMatch(err.stderr, /Traceback/)
    return true
  })
})
