// A peer found silent in one search is not asked again in the next while its declaration from
// before the silence is still listed: a frozen agent's survivors each paid a request timeout per
// search asking it to lead them (freeze runs: 19 of 57 such asks by peers that had found it silent
// seconds before). A declaration made after the silence (the peer back) is asked as any other.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startConnectedNodes } from '../../../bench/lib/loopback-nodes.js'
import { Matchmaker } from '../../../agent/matchmaking/matchmaker.js'
import { aliveProtocol, joinProtocol } from '../../../agent/matchmaking/join-protocol.js'
import { Silences } from '../../../agent/matchmaking/silences.js'
import { declaredBeforeSilence } from '../../../agent/matchmaking/decisions.js'
import { PeerMode, type PeerInfo } from '../../../agent/proto/averaging.js'
import { MatchmakingError } from '../../../agent/errors.js'
import { linesLog } from '../../../agent/log.js'

const EXPIRATION = 3
const REQUEST_TIMEOUT = 0.5

test('silences: the last silence counts until the peer is heard from after it, whichever service saw it', () => {
  const silences = new Silences()
  assert.equal(silences.silentAt('a'), undefined)
  silences.noteSilent('a', 100)
  assert.equal(silences.silentAt('a'), 100)
  assert.equal(silences.silentAt('a', 105), 105, 'a later silence elsewhere (the rendezvous) counts')
  silences.noteAlive('a', 101)
  assert.equal(silences.silentAt('a'), undefined, 'heard from after it')
  assert.equal(silences.silentAt('a', 102), 102, 'silent again after that')
  assert.equal(silences.silentAt('b', 50), 50)
})

test('declaredBeforeSilence: a declaration made before the silence is a leftover; one made after, the peer back', () => {
  assert.equal(declaredBeforeSilence(110, 15, 100), true, 'declared at 95, silent at 100')
  assert.equal(declaredBeforeSilence(120, 15, 100), false, 'declared at 105, after the silence')
  assert.equal(declaredBeforeSilence(110, 15, undefined), false)
})

test('a peer found silent is not asked to lead while its declaration from before the silence is listed; one declared after it is', { timeout: 60_000 }, async () => {
  const [frozen, asker] = await startConnectedNodes(2, () => ({ rendezvous: { requestTimeoutMs: REQUEST_TIMEOUT * 1000 } }))
  const lines: string[] = []
  const matchmaker = new Matchmaker(asker, asker.services.rendezvous, {
    prefix: 'test', mode: PeerMode.NODE, schemaHash: new Uint8Array(32), targetGroupSize: 2, minGroupSize: 2,
    averagingExpiration: EXPIRATION, requestTimeout: REQUEST_TIMEOUT, log: linesLog(line => lines.push(line), 'debug')
  })
  try {
    // Frozen as SIGSTOP leaves an agent: its streams open and are never answered.
    for (const protocol of [joinProtocol('test'), aliveProtocol('test')]) await frozen.handle(protocol, () => {}, { maxInboundStreams: 64 })
    const id = frozen.peerId.toString()
    // Its declaration, made half a second ago: it expires before ours will, so it ranks above us.
    const declare = async (): Promise<void> => {
      await frozen.services.rendezvous.declare('key', { peerId: id, expiration: Date.now() / 1000 + EXPIRATION - 0.5, looking: true, priority: 0, addrs: [] })
    }
    await matchmaker.start()
    await declare()
    // Found silent outside any search, as an all-reduce's liveness check of a late member finds it.
    assert.equal(await matchmaker.liveness.check(frozen.peerId, REQUEST_TIMEOUT * 1000), 'silent')
    const info: PeerInfo = { mode: PeerMode.NODE, weight: 1, userData: new Uint8Array(0), dataPort: 0, addrs: [], dataAddrs: [], round: 0 }
    const asks = (): number => lines.filter(l => l.startsWith(`debug asking ${id.slice(-6)} `)).length
    const search = async (): Promise<void> => {
      await assert.rejects(matchmaker.lookForGroup('key', info, Date.now() / 1000 + EXPIRATION + 1), MatchmakingError)
    }
    await search()
    assert.equal(asks(), 0, `the search did not ask the silent peer's old declaration to lead it: ${lines.join('\n')}`)
    assert.ok(lines.some(l => l.includes(`${id.slice(-6)} (exp `) && l.includes('counted silent, not asked')))
    // Declared again after the silence: the peer may be back, and is asked.
    await declare()
    await search()
    assert.equal(asks(), 1, `the search asked its new declaration: ${lines.join('\n')}`)
  } finally {
    await matchmaker.stop()
    await Promise.allSettled([frozen.stop(), asker.stop()])
  }
})
