/**
 * A key's replicas that stop answering (a crashed agent lingering in routing tables, an agent
 * starved of CPU) must not leave the key unreachable: the next closest peers stand in for them.
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { sha256 } from 'multiformats/hashes/sha2'
import { startConnectedNodes } from '../../../bench/lib/loopback-nodes.js'
import { RENDEZVOUS_PROTOCOL, rankByDistance } from '../../../agent/rendezvous/rendezvous.js'
import type { StoredEntry } from '../../../agent/rendezvous/store.js'
import type { SwarmNode } from '../../../agent/net/node.js'
import { linesLog } from '../../../agent/log.js'

test('when a key\'s three closest peers hold every request unanswered, a declaration and a lookup still meet on the next closest', { timeout: 120_000 }, async () => {
  const nodes = await startConnectedNodes(8, () => ({ rendezvous: { requestTimeoutMs: 1000 } }))
  try {
    const key = 'stand-ins-test'
    const target = (await sha256.digest(new TextEncoder().encode(key))).digest
    const ranked = await rankByDistance(nodes.map(n => n.peerId), target)
    const byRank = ranked.map(id => nodes.find(n => n.peerId.equals(id))!)
    // The three replicas accept each stream and never answer.
    for (const stalled of byRank.slice(0, 3)) {
      await stalled.unhandle(RENDEZVOUS_PROTOCOL)
      await stalled.handle(RENDEZVOUS_PROTOCOL, () => {}, { maxInboundStreams: 64 })
    }
    const [declarer, finder] = [byRank[3], byRank[4]]
    const entry: StoredEntry = { peerId: declarer.peerId.toString(), expiration: Date.now() / 1000 + 60, looking: true, priority: 0, addrs: [] }
    const declared = await declarer.services.rendezvous.declare(key, entry)
    assert.deepEqual(declared.map(e => e.peerId), [entry.peerId], 'the declarer reads its own entry back from a stand-in')
    const found = await finder.services.rendezvous.find(key)
    assert.deepEqual(found.map(e => e.peerId), [entry.peerId], 'another peer finds the entry on the stand-ins')
  } finally {
    await Promise.allSettled(nodes.map(async n => { await n.stop() }))
  }
})

test('replicas that answer again are asked again within a request timeout, not when their suspicion lapses', { timeout: 120_000 }, async () => {
  const requestTimeoutMs = 1000
  const nodes = await startConnectedNodes(8, () => ({ rendezvous: { requestTimeoutMs } }))
  try {
    const key = 'probe-test'
    const target = (await sha256.digest(new TextEncoder().encode(key))).digest
    const byRank = (await rankByDistance(nodes.map(n => n.peerId), target)).map(id => nodes.find(n => n.peerId.equals(id))!)
    const replicas = byRank.slice(0, 3)
    // Stalled the way a cut network or a frozen agent stalls them: requests arrive, answers never leave.
    for (const stalled of replicas) Object.assign(stalled.services.rendezvous, { serve: async () => await new Promise(() => {}) })
    const declarer = byRank[3]
    const entry = (): StoredEntry => ({ peerId: declarer.peerId.toString(), expiration: Date.now() / 1000 + 60, looking: true, priority: 0, addrs: [] })
    await declarer.services.rendezvous.declare(key, entry())
    const suspectedAt = Date.now()
    // The network heals: the replicas answer again.
    for (const replica of replicas) delete (replica.services.rendezvous as unknown as { serve?: unknown }).serve
    // The first exchange a request timeout after the failures skips the suspects and asks them in
    // the background; the next one asks them as replicas.
    await new Promise(resolve => setTimeout(resolve, requestTimeoutMs))
    await declarer.services.rendezvous.declare(key, entry())
    await new Promise(resolve => setTimeout(resolve, 300))
    await declarer.services.rendezvous.declare(key, entry())
    const elapsed = Date.now() - suspectedAt
    const holding = replicas.filter(r => r.services.rendezvous.store.get(key, Date.now() / 1000).some(e => e.peerId === declarer.peerId.toString()))
    assert.ok(elapsed < 5 * requestTimeoutMs, `the test outran the suspicion it checks (${elapsed} ms)`)
    assert.equal(holding.length, 3, `${holding.length} of the key's 3 replicas hold the declaration ${elapsed} ms after they were suspected`)
  } finally {
    await Promise.allSettled(nodes.map(async n => { await n.stop() }))
  }
})

test('a declaration answers once a majority of the key\'s replicas did, without waiting out a frozen one, and reads what the others stored', { timeout: 120_000 }, async () => {
  const requestTimeoutMs = 5000
  const logs: string[][] = Array.from({ length: 8 }, () => [])
  const nodes = await startConnectedNodes(8, (i) => ({ rendezvous: { requestTimeoutMs, log: linesLog(line => logs[i].push(line), 'debug') } }))
  try {
    const key = 'quorum-test'
    const target = (await sha256.digest(new TextEncoder().encode(key))).digest
    const byRank = (await rankByDistance(nodes.map(n => n.peerId), target)).map(id => nodes.find(n => n.peerId.equals(id))!)
    // One replica frozen: requests arrive, answers never leave.
    const frozen = byRank[0]
    Object.assign(frozen.services.rendezvous, { serve: async () => await new Promise(() => {}) })
    const entry = (node: SwarmNode): StoredEntry => ({ peerId: node.peerId.toString(), expiration: Date.now() / 1000 + 60, looking: true, priority: 0, addrs: [] })
    const [first, second] = [byRank[3], byRank[4]]
    const lines = logs[nodes.indexOf(second)]
    await first.services.rendezvous.declare(key, entry(first))
    const seen = await second.services.rendezvous.declare(key, entry(second))
    const frozenFailed = (): boolean => lines.some(l => l.includes(`replica ${frozen.peerId.toString()} failed`))
    assert.equal(frozenFailed(), false, 'the declaration answered before the frozen replica\'s request timed out')
    assert.deepEqual(seen.map(e => e.peerId).sort(), [first, second].map(n => n.peerId.toString()).sort(), 'the majority that answered holds the earlier declaration')
    assert.ok(lines.some(l => l.includes(`not waiting for ${frozen.peerId.toString().slice(-6)}`)), lines.join('\n'))
    // The frozen replica's call runs on to its timeout, so the replica is suspected as before.
    const deadline = Date.now() + 3 * requestTimeoutMs
    while (!frozenFailed() && Date.now() < deadline) await new Promise(resolve => setTimeout(resolve, 100))
    assert.ok(frozenFailed(), 'the frozen replica\'s request still ran to its timeout')
  } finally {
    await Promise.allSettled(nodes.map(async n => { await n.stop() }))
  }
})
