import { test } from 'node:test'
import assert from 'node:assert/strict'
import { multiaddr } from '@multiformats/multiaddr'
import { loadAgentConfig } from '../../../agent/config.js'
import { isCircuit, modeFor, type Reachability } from '../../../agent/net/reach.js'

const base = { AVS_SWARM: 's', AVS_POD_NAME: 's-agent-0', AVS_PREFIX: 'ns_s' }

test('relaying is off unless AVS_RELAY=serve, with bounded defaults once on; reachability defaults to auto', () => {
  const off = loadAgentConfig(base)
  assert.equal(off.relay, undefined)
  assert.equal(off.reachability, 'auto')
  assert.deepEqual(loadAgentConfig({ ...base, AVS_RELAY: 'serve' }).relay, { maxReservations: 128, circuitBytes: 65536 * 1024 * 1024, circuitDurationMs: 3_600_000 })
  assert.deepEqual(loadAgentConfig({ ...base, AVS_RELAY: 'serve', AVS_RELAY_MAX_RESERVATIONS: '4', AVS_RELAY_CIRCUIT_MIB: '1', AVS_RELAY_CIRCUIT_DURATION: '1m30s' }).relay,
    { maxReservations: 4, circuitBytes: 1024 * 1024, circuitDurationMs: 90_000 })
  assert.equal(loadAgentConfig({ ...base, AVS_REACHABILITY: 'private' }).reachability, 'private')
})

test('bad relay and reachability values are refused naming their variable', () => {
  for (const [name, value, says] of [
    ['AVS_RELAY', 'on', 'is not one of serve, off'],
    ['AVS_RELAY_MAX_RESERVATIONS', '0', 'is not an integer from 1 to 4096'],
    ['AVS_RELAY_CIRCUIT_MIB', '1048577', 'is not an integer from 1 to 1048576'],
    ['AVS_RELAY_CIRCUIT_DURATION', '25h', 'is not a duration from 1s to 24h'],
    ['AVS_RELAY_CIRCUIT_DURATION', 'soon', 'is not a duration such as'],
    ['AVS_REACHABILITY', 'nat', 'is not one of auto, public, private']
  ]) {
    assert.throws(() => loadAgentConfig({ ...base, AVS_RELAY: 'serve', [name]: value }), (err: Error) => err.message.includes(`${name}: "${value}" ${says}`), `${name}=${value}`)
  }
})

test('only an agent nobody can reach becomes a client; relayed and public ones keep their mode', () => {
  const relayed: Reachability = { kind: 'relayed', why: 'NAT', relay: 'r', addrs: [] }
  const unreachable: Reachability = { kind: 'unreachable', why: 'NAT, no slot' }
  assert.equal(modeFor({ kind: 'public', why: '' }, 'node'), 'node')
  assert.equal(modeFor(relayed, 'node'), 'node')
  assert.equal(modeFor(unreachable, 'node'), 'client')
  assert.equal(modeFor(unreachable, 'client'), 'client')
  assert.equal(modeFor(unreachable, 'auxiliary'), 'auxiliary')
})

test('relayed addresses are told apart from direct ones', () => {
  assert.ok(isCircuit(multiaddr('/ip4/1.2.3.4/tcp/1/p2p/12D3KooWDgsoQH61Jyqn15wUnUSRzzHNusAvBqxhss5esTCjD9Uv/p2p-circuit/p2p/12D3KooWNoGynaPTCXNru8mPqaGzh1vtPXMtuZqjA4R9iRzj4RiX')))
  assert.ok(!isCircuit(multiaddr('/ip4/1.2.3.4/tcp/1/p2p/12D3KooWDgsoQH61Jyqn15wUnUSRzzHNusAvBqxhss5esTCjD9Uv')))
})
