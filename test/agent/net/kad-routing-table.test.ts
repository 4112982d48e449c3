import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { KadDHT } from '@libp2p/kad-dht'
import { kadRoutingTable } from '../../../agent/net/kad-routing-table.js'

test('the kad-dht routing-table adapter names the release it was written for when the table is not where it expects', () => {
  const moved = {} as unknown as KadDHT
  assert.throws(() => kadRoutingTable(moved), (err: Error) => /@libp2p\/kad-dht 16\.4\.5/.test(err.message) && !err.message.includes('\n'))
  const table = { size: 2, closestPeers: () => [], add: async () => {}, remove: async () => {} }
  assert.throws(() => kadRoutingTable({ routingTable: { ...table, remove: undefined } } as unknown as KadDHT), /add and remove/, 'a release without remove')
  assert.equal(kadRoutingTable({ routingTable: table } as unknown as KadDHT), table)
})
