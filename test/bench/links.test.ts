import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { runLinksRow } from '../../bench/lib/links-run.js'
import { shapedLinksUnsupported } from '../../bench/lib/shaped-links.js'
import { ONE_FLOW, measureRate } from '../../bench/lib/tcp-goodput.js'

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
      changes: [], timeoutS: 50, logs: 'bench/results/logs/links-test', tag,
      // --sysctl's path: set in every peer's namespace before the peers start.
      sysctls: ['net.ipv4.tcp_notsent_lowat=131072']
    })
    assert.equal(row.outcome.status, 'ok', row.outcome.message)
    assert.equal(row.stats?.maxAbsError, 0, 'every peer holds the exact mean')
    // 4 MiB per peer: each moves at least its tensor out and the means back in (more where it reduces).
    assert.ok(row.movedBytesPerRoundPerPeer != null && row.movedBytesPerRoundPerPeer > 2 * 4 * (1 << 20), `tc counted ${row.movedBytesPerRoundPerPeer} bytes per peer per round`)
    // A 100 Mbit/s link cannot carry a round in less than its floor: the shaping is real.
    assert.ok(row.stats!.roundMs / 1000 >= row.floorBestS, `round ${row.stats!.roundMs} ms, floor ${row.floorBestS} s`)
    // The bytes tbf counted carry headers and ACKs beyond the payload; a round does not beat its own bytes at
    // line rate by more than tbf's bucket (128 KiB, refilled while the link idles between rounds) lets through.
    assert.ok(row.wireFloorS != null && row.wireFloorS >= row.floorBestS, `wire floor ${row.wireFloorS} s, payload floor ${row.floorBestS} s`)
    assert.ok(row.stats!.roundMs / 1000 >= row.wireFloorS - 128 * 1024 / (100e6 / 8), `round ${row.stats!.roundMs} ms, wire floor ${row.wireFloorS} s`)
  } finally {
    const left = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' }).split('\n').filter(l => l.startsWith(tag))
    assert.deepEqual(left, [], 'the test\'s network namespaces are gone')
  }
})

// The libp2p data path (relayed members' only one, and the fallback where a direct channel cannot
// connect) on slow links: there the acceptances, liveness checks and rendezvous answers share each
// connection with the parts and means. With yamux windows grown to megabytes they waited seconds
// behind them, healthy members were cut off and every such run failed ("N parts were not averaged").
test('bench:links: 4 peers with parts on libp2p streams over 10 Mbit/s links average exactly', { skip: unsupported, timeout: 120_000 }, async () => {
  const tag = `lp${process.pid % 10000}`
  try {
    const row = await runLinksRow({
      profile: '10m', rates: [10, 10, 10, 10], impl: 'ours-libp2p', codec: 'none', elements: 2 << 20, rounds: 1, warmup: 1,
      changes: [], timeoutS: 100, logs: 'bench/results/logs/links-test', tag,
      // --flows's path: ss in every namespace while the round runs.
      flowsEveryMs: 200
    })
    assert.equal(row.outcome.status, 'ok', row.outcome.message)
    assert.equal(row.stats?.maxAbsError, 0, 'every peer holds the exact mean')
    assert.ok(row.stats!.roundMs / 1000 >= row.floorBestS, `round ${row.stats!.roundMs} ms, floor ${row.floorBestS} s: the shaping is real`)
    // Each peer sends the three quarters of its 8 MiB outside its span to the other three, so the sampled
    // flows out of every rank carry at least that; and every pair of ranks exchanged something.
    const [round] = row.flows ?? []
    assert.ok(round !== undefined, 'the measured round has flow rows')
    for (let rank = 0; rank < 4; rank++) {
      const sent = round.filter(f => f.from === rank).reduce((s, f) => s + f.bytes, 0)
      assert.ok(sent >= 0.75 * 8 * (1 << 20), `rank ${rank}'s flows carried ${sent} bytes`)
    }
    assert.equal(round.length, 12, 'every directed pair of the 4 ranks moved bytes')
    // Liveness checks between members share these congested connections; each must be answered, not
    // closed unanswered at the answerer's bound (they all were while the answer waited for the asker's byte).
    const unanswered = readdirSync(row.logDir).filter(f => f.endsWith('.log'))
      .flatMap(f => readFileSync(join(row.logDir, f), 'utf8').split('\n').filter(l => /liveness check of \S+ (closed unanswered|failed)/.test(l)))
    assert.deepEqual(unanswered, [], 'no liveness check went unanswered')
  } finally {
    const left = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' }).split('\n').filter(l => l.startsWith(tag))
    assert.deepEqual(left, [], 'the test\'s network namespaces are gone')
  }
})

// bench:tbf-goodput's measurement, so it cannot rot: one TCP flow through a 100 Mbit/s tbf link.
// Above 0.5 of line rate: it measures payload, not a stall; at most 1.0: the shaping is real.
test('bench:tbf-goodput: one TCP flow through a 100 Mbit/s tbf link, and the namespaces are gone after', { skip: unsupported, timeout: 30_000 }, async () => {
  const tag = `lg${process.pid % 10000}`
  try {
    const [row] = await measureRate({ tag, mbit: 100, cases: [ONE_FLOW], totalBytes: 12e6 })
    assert.equal(row.bytes, 12e6)
    assert.ok(row.ratio > 0.5 && row.ratio <= 1.0, `goodput ${row.goodputMbit.toFixed(1)} Mbit/s = ${row.ratio.toFixed(3)} of 100 Mbit/s in ${row.seconds.toFixed(2)} s`)
    // tbf counted headers too: the payload is less than what it let through.
    assert.ok(row.wireBytes > row.bytes, `tbf passed ${row.wireBytes} bytes for ${row.bytes} of payload`)
  } finally {
    const left = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' }).split('\n').filter(l => l.startsWith(tag))
    assert.deepEqual(left, [], 'the test\'s network namespaces are gone')
  }
})
