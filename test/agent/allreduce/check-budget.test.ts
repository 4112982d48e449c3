import { test } from 'node:test'
import assert from 'node:assert/strict'
import { aliveCheckBudgetMs, type SharedLink } from '../../../agent/allreduce/check-budget.js'
import { AGGREGATE_RECEIVE_WINDOW } from '../../../agent/allreduce/aggregate-protocol.js'
import { RoundContext } from '../../../agent/allreduce/round-context.js'
import type { AggregateDialer } from '../../../agent/allreduce/aggregate-dialer.js'
import { PeerMode, type PeerInfo } from '../../../agent/proto/averaging.js'
import { codecFor } from '../../../agent/compression/index.js'

const WINDOWS = 4 * AGGREGATE_RECEIVE_WINDOW
const BIG = 64 << 20
const link = (fromMember: number, memberMs: number, fromAll = 3 * fromMember, allMs = memberMs, exchangeBytes = BIG): SharedLink =>
  ({ exchangeBytes, fromMember: { bytes: fromMember, activeMs: memberMs }, fromAll: { bytes: fromAll, activeMs: allMs }, members: 3 })

test('a check over a shared libp2p connection gets the time four yamux windows take at the member\'s rate this round', () => {
  // 10 Mbit/s links, 4 members: ~0.4 MB/s from each.
  assert.equal(aliveCheckBudgetMs(2000, link(1e6, 2500)), 2000 + WINDOWS / 400)
  // No bytes from this member yet: the group's rate per member.
  assert.equal(aliveCheckBudgetMs(2000, link(0, 0, 3e6, 2500)), 2000 + WINDOWS / 400)
  // A fast link adds next to nothing: 1 GB/s.
  assert.ok(aliveCheckBudgetMs(2000, link(1e9, 1000)) < 2003)
  // A member slower than the others is given more, not less.
  assert.ok(aliveCheckBudgetMs(2000, link(1e5, 2500, 3e6)) > aliveCheckBudgetMs(2000, link(1e6, 2500, 3e6)))
})

test('no more bytes are waited for than the round exchanges with the member, at the rate they came while they came', () => {
  // 90 KB each way (small spans): what is ahead of the check is at most that, not four windows.
  assert.equal(aliveCheckBudgetMs(2000, link(1e6, 2500, 3e6, 2500, 90_000)), 2000 + 2 * 90_000 / 400)
  // Its bytes all came in the first 100 ms, and the round has run for seconds since: the link is as fast as it was.
  assert.equal(aliveCheckBudgetMs(2000, link(40_000, 100, 120_000, 100, 90_000)), 2000 + 2 * 90_000 / 400)
})

test('without a shared connection, or with nothing read yet to judge the link by, a check gets the request timeout', () => {
  assert.equal(aliveCheckBudgetMs(2000, undefined), 2000)
  assert.equal(aliveCheckBudgetMs(2000, link(0, 0, 0, 0)), 2000)
  assert.equal(aliveCheckBudgetMs(2000, link(5, 0)), 2000, 'bytes within the first millisecond: no rate to judge by')
  assert.equal(aliveCheckBudgetMs(2000, { exchangeBytes: BIG, fromMember: { bytes: 0, activeMs: 0 }, fromAll: { bytes: 5, activeMs: 10 }, members: 0 }), 2000)
})

test('a round\'s liveness checks run under the longer bound only for members whose parts or means take libp2p streams', async () => {
  const ids = ['me', 'direct-peer', 'libp2p-peer']
  const info = (): PeerInfo => ({ mode: PeerMode.NODE, weight: 1, userData: new Uint8Array(0), dataPort: 0, addrs: [], dataAddrs: [], round: 0 })
  const asked: Array<{ peer: string, withinMs: number }> = []
  const ctx = new RoundContext({
    dialer: undefined as unknown as AggregateDialer, // the context never dials
    group: { groupId: new Uint8Array(20), peerIds: ids, infos: ids.map(info), myIndex: 0, leader: ids[0] },
    tensors: [new Float32Array(3 * 4096)],
    codec: codecFor('none'),
    partSizeBytes: 1024,
    alpha: 1,
    timeoutMs: 60_000,
    senderTimeoutMs: 30_000,
    deadlineSlackMs: 4000,
    reducerTimeoutMs: 60_000,
    alive: async (peer, withinMs) => { asked.push({ peer, withinMs }); return true },
    aliveCheckMs: 2000
  })
  ctx.channelWith(1, 'direct')
  ctx.channelWith(2, 'libp2p')
  // Before any byte: nothing to judge the links by.
  assert.equal(ctx.aliveCheckMsFor(2), 2000)
  await new Promise(resolve => setTimeout(resolve, 30))
  ctx.heardFrom(1, 4 << 20)
  const before = Date.now() - ctx.started
  ctx.heardFrom(2, 1 << 20)
  const after = Date.now() - ctx.started
  assert.equal(ctx.bytesReceived, 5 << 20, 'every member\'s bytes count towards the round\'s')
  assert.equal(ctx.aliveCheckMsFor(1), 2000, 'the direct channel leaves the libp2p connection to the check')
  // 1 MiB from it, the last of it `before`-`after` ms into the round; the round exchanges its span and ours
  // each way (16 KiB each here, far less than the windows), and those, both ways, are what the check may wait behind.
  const exchange = 2 * (spanBytes(ctx, 2) + spanBytes(ctx, 0))
  assert.equal(exchange, 2 * 2 * 16 * 1024)
  await new Promise(resolve => setTimeout(resolve, 30))
  const shared = ctx.aliveCheckMsFor(2)
  assert.ok(shared >= 2000 + exchange / ((1 << 20) / before) && shared <= 2000 + exchange / ((1 << 20) / after),
    `the two spans both ways at the member's rate while its bytes came (not since): ${shared} ms, ${before}-${after} ms into the round`)
  assert.equal(await ctx.checkAlive(2, 'reducer'), true)
  assert.equal(asked.length, 1)
  assert.equal(asked[0].peer, 'libp2p-peer')
  assert.ok(asked[0].withinMs > 2000, `the check ran under ${asked[0].withinMs} ms`)
  assert.equal(ctx.lastCheckMs(2), asked[0].withinMs, 'the cut-off message names the bound its check ran under')
  assert.equal(ctx.lastCheckMs(1), 2000)
})

function spanBytes (ctx: RoundContext, m: number): number {
  let bytes = 0
  for (let k = ctx.plan.spanStart[m]; k < ctx.plan.spanEnd[m]; k++) bytes += 4 * ctx.plan.parts[k].length
  return bytes
}
