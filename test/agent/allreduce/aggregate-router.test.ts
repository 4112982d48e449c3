import { test } from 'node:test'
import assert from 'node:assert/strict'
import { AggregateRouter } from '../../../agent/allreduce/aggregate-handler.js'
import { AggregateHeader, AggregateReply, MatchCode } from '../../../agent/proto/averaging.js'
import type { AllReduceRunner } from '../../../agent/allreduce/runner.js'
import { repairGroupId } from '../../../agent/allreduce/repair.js'
import { MemoryChannel } from './memory-channel.js'

// Where the router sends an inbound aggregate stream, and how soon it says "no such round": a
// stream for a round that ended here, or for a repair of one that ran none, is answered at once;
// one for a group not registered yet waits for it (up to the header timeout).

const HEADER_TIMEOUT_MS = 2000
const round = new Uint8Array(20).fill(1)
const repair = repairGroupId(round, [2])

/** A runner that accepts every stream and counts them. */
function acceptingRunner (): { runner: AllReduceRunner, accepted: () => number } {
  let n = 0
  const runner = {
    acceptSender: async (framed: MemoryChannel) => {
      n++
      await framed.write(AggregateReply.encode({ code: MatchCode.ACCEPTED, reason: '' }))
    }
  } as unknown as AllReduceRunner
  return { runner, accepted: () => n }
}

/** Opens a stream to the router with this header; resolves with its reply and how long it took. */
async function ask (router: AggregateRouter, groupId: Uint8Array, repairOf = new Uint8Array(0)): Promise<{ code: MatchCode, reason: string, ms: number }> {
  const [mine, theirs] = MemoryChannel.pair('asker', 'router')
  const started = performance.now()
  router.accept(theirs, 'asker')
  await mine.write(AggregateHeader.encode({ groupId: groupId as Uint8Array<ArrayBuffer>, repairOf: repairOf as Uint8Array<ArrayBuffer> }))
  const bytes = await mine.read(3 * HEADER_TIMEOUT_MS)
  assert.ok(bytes != null, 'the router answered')
  const reply = AggregateReply.decode(bytes)
  return { code: reply.code, reason: reply.reason, ms: performance.now() - started }
}

test('a repair of a round that ended here without one is refused at once; so is a late stream of that round', async () => {
  const router = new AggregateRouter(1 << 20, HEADER_TIMEOUT_MS)
  router.register(round, acceptingRunner().runner)
  router.unregister(round)
  const toRepair = await ask(router, repair, round)
  assert.equal(toRepair.code, MatchCode.NOT_LOOKING_FOR_GROUP)
  assert.equal(toRepair.reason, 'no repair of that round here')
  assert.ok(toRepair.ms < HEADER_TIMEOUT_MS / 4, `answered in ${toRepair.ms} ms`)
  const late = await ask(router, round)
  assert.equal(late.code, MatchCode.NOT_LOOKING_FOR_GROUP)
  assert.ok(late.ms < HEADER_TIMEOUT_MS / 4, `answered in ${late.ms} ms`)
})

test('a repair\'s stream that comes while its round still runs waits: for the repair, registered in the turn the round ends; or for the round\'s end without one', async () => {
  const router = new AggregateRouter(1 << 20, HEADER_TIMEOUT_MS)
  router.register(round, acceptingRunner().runner)
  const early = ask(router, repair, round)
  await new Promise(resolve => setTimeout(resolve, 100))
  const { runner, accepted } = acceptingRunner()
  router.unregister(round)
  router.register(repair, runner)
  assert.equal((await early).code, MatchCode.ACCEPTED)
  assert.equal(accepted(), 1)

  const other = new Uint8Array(20).fill(9)
  router.register(other, acceptingRunner().runner)
  const none = ask(router, repairGroupId(other, [0]), other)
  await new Promise(resolve => setTimeout(resolve, 100))
  router.unregister(other)
  const answer = await none
  assert.equal(answer.code, MatchCode.NOT_LOOKING_FOR_GROUP)
  assert.ok(answer.ms < HEADER_TIMEOUT_MS / 2, `answered ${answer.ms} ms after it came, right after the round ended`)
})

test('a stream for a group not seen here waits for it to be registered, and is refused at the header timeout', async () => {
  const router = new AggregateRouter(1 << 20, HEADER_TIMEOUT_MS)
  const group = new Uint8Array(20).fill(5)
  const { runner, accepted } = acceptingRunner()
  const racing = ask(router, group)
  await new Promise(resolve => setTimeout(resolve, 100))
  router.register(group, runner)
  assert.equal((await racing).code, MatchCode.ACCEPTED)
  assert.equal(accepted(), 1)
  const stranger = await ask(router, new Uint8Array(20).fill(6))
  assert.equal(stranger.code, MatchCode.NOT_LOOKING_FOR_GROUP)
  assert.ok(stranger.ms >= HEADER_TIMEOUT_MS - 50, `waited ${stranger.ms} ms`)
})
