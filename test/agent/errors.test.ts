import { test } from 'node:test'
import assert from 'node:assert/strict'
import { isAnotherPeerAtAddress } from '../../agent/errors.js'

const named = (name: string, message: string, cause?: unknown): Error => Object.assign(new Error(message, { cause }), { name })

test('isAnotherPeerAtAddress: a handshake that met another key at the address, however libp2p wraps it', () => {
  const mismatch = 'Payload identity key 12D3KooWB does not match expected remote identity key 12D3KooWA'
  assert.equal(isAnotherPeerAtAddress(named('UnexpectedPeerError', mismatch)), true, "noise's own error")
  assert.equal(isAnotherPeerAtAddress(named('EncryptionFailedError', mismatch)), true, "libp2p's upgrader passes on the message only")
  assert.equal(isAnotherPeerAtAddress(new AggregateError([new Error('connect ECONNREFUSED'), named('EncryptionFailedError', mismatch)])), true, 'one address of several')
  assert.equal(isAnotherPeerAtAddress(named('DialError', 'dial failed', named('UnexpectedPeerError', mismatch))), true, 'as a cause')
  assert.equal(isAnotherPeerAtAddress(named('EncryptionFailedError', 'handshake stage 1 validation fail: bad MAC')), false, 'another encryption failure says nothing of who is there')
  assert.equal(isAnotherPeerAtAddress(new Error('connect ECONNREFUSED 127.0.0.1:4001')), false, 'nobody there: it may come back')
  assert.equal(isAnotherPeerAtAddress(named('TimeoutError', 'no answer within 1000 ms')), false, 'silent: frozen or starved')
  assert.equal(isAnotherPeerAtAddress('string'), false)
})
