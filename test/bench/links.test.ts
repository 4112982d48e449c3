import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { runLinksRow } from '../../bench/lib/links-run.js'
import { shapedLinksUnsupported } from '../../bench/lib/shaped-links.js'

const unsupported = await shapedLinksUnsupported()
if (unsupported !== undefined) console.log(`shaped-links test skipped: ${unsupported}`)

// The bench:links harness end to end, so it cannot rot: 4 real peers of ours in 4 network
// namespaces, links shaped by tbf both ways (2 × 1 Gbit/s + 2 × 100 Mbit/s), bandwidth measured by
// the agents, small tensors, the exact mean checked by every peer.
test('bench:links: 4 peers over shaped links average exactly, and the namespaces are gone after', { skip: unsupported, timeout: 60_000 }, async () => {
  const tag = `lt${process.pid % 10000}`
  try {
    const row = await runLinksRow({
      profile: 'mixed', rates: [1000, 1000, 100, 100], impl: 'ours', codec: 'none', elements: 1 << 20, rounds: 2, warmup: 1,
      changes: [], timeoutS: 50, logs: 'bench/results/logs/links-test', tag
    })
    assert.equal(row.outcome.status, 'ok', row.outcome.message)
    assert.equal(row.stats?.maxAbsError, 0, 'every peer holds the exact mean')
    // 4 MiB per peer: each moves at least its tensor out and the means back in (more where it reduces).
    assert.ok(row.movedBytesPerRoundPerPeer != null && row.movedBytesPerRoundPerPeer > 2 * 4 * (1 << 20), `tc counted ${row.movedBytesPerRoundPerPeer} bytes per peer per round`)
    // A 100 Mbit/s link cannot carry a round in less than its floor: the shaping is real.
    assert.ok(row.stats!.roundMs / 1000 >= row.floorBestS, `round ${row.stats!.roundMs} ms, floor ${row.floorBestS} s`)
  } finally {
    const left = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' }).split('\n').filter(l => l.startsWith(tag))
    assert.deepEqual(left, [], 'the test\'s network namespaces are gone')
  }
})
