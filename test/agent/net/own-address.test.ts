import { test } from 'node:test'
import assert from 'node:assert/strict'
import { multiaddr } from '@multiformats/multiaddr'
import { atOwnAddress } from '../../../agent/net/rpc.js'

const OLD = '12D3KooWRBy97UB99e3J6hiPesre1MZeuNQvfan4gBziswrRJsNK'
const RELAY = '12D3KooWGRUVh1GHUtRZaLfCa7ZPbwFK4DNQb5bvBy6wEGM5X2BD'
const NOW = '12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo'

test('atOwnAddress: our previous process (same address, another peer id) is ours; others and relays are not', () => {
  const node = { getMultiaddrs: () => [multiaddr(`/ip4/10.0.0.5/tcp/31337/p2p/${NOW}`), multiaddr(`/ip4/1.2.3.4/tcp/4001/p2p/${RELAY}/p2p-circuit/p2p/${NOW}`)] }
  const bytes = (...a: string[]): Uint8Array[] => a.map(x => multiaddr(x).bytes)
  assert.equal(atOwnAddress(node, bytes(`/ip4/10.0.0.5/tcp/31337/p2p/${OLD}`)), true)
  assert.equal(atOwnAddress(node, bytes('/ip4/10.0.0.5/tcp/31337')), true)
  assert.equal(atOwnAddress(node, bytes(`/ip4/10.0.0.6/tcp/31337/p2p/${OLD}`, `/ip4/10.0.0.5/tcp/31338/p2p/${OLD}`)), false)
  // Every peer behind the relay shares its address: a relayed one is never taken for ours.
  assert.equal(atOwnAddress(node, bytes(`/ip4/1.2.3.4/tcp/4001/p2p/${RELAY}/p2p-circuit/p2p/${OLD}`)), false)
  assert.equal(atOwnAddress(node, [new Uint8Array([0xff, 0xff, 0xff])]), false)
  assert.equal(atOwnAddress(node, []), false)
})
