/**
 * An agent that restarts at its old address with a new key (a container restart keeps the pod's IP,
 * and only bootstrap agents keep their key) leaves its old peer id in the others' routing tables;
 * kad-dht evicts a contact only from a full bucket, so in a small swarm the old id stayed for good and
 * was asked and probed as a replica again and again. A peer whose address answers as another peer is
 * forgotten: out of the routing table and the peer store.
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { sha256 } from 'multiformats/hashes/sha2'
import { startConnectedNodes } from '../../../bench/lib/loopback-nodes.js'
import { createSwarmNode, type SwarmNode } from '../../../agent/net/node.js'
import { kadRoutingTable } from '../../../agent/net/kad-routing-table.js'
import { rankByDistance } from '../../../agent/rendezvous/rendezvous.js'
import type { StoredEntry } from '../../../agent/rendezvous/store.js'
import { testLog } from '../test-log.js'

test('a replica whose address now answers with another key is forgotten, and the key is still reached', { timeout: 120_000 }, async () => {
  const nodes = await startConnectedNodes(5, (i) => ({ rendezvous: { requestTimeoutMs: 1000, log: testLog(`peer ${i}`) } }))
  let successor: SwarmNode | undefined
  try {
    const [asker, ...others] = nodes
    // A key whose three closest peers include the one that restarts.
    const restarting = others[others.length - 1]
    let key = ''
    let target = new Uint8Array()
    for (let i = 0; key === ''; i++) {
      target = (await sha256.digest(new TextEncoder().encode(`forget-${i}`))).digest
      const ranked = await rankByDistance(nodes.map(n => n.peerId), target)
      if (ranked.slice(0, 3).some(p => p.equals(restarting.peerId))) key = `forget-${i}`
    }
    const oldId = restarting.peerId
    const address = restarting.getMultiaddrs()[0].toString()
    assert.ok(kadRoutingTable(asker.services.dht).closestPeers(target, { count: 20 }).some(p => p.equals(oldId)), 'the asker knows the peer before its restart')
    // It restarts at the same address with a new key.
    await restarting.stop()
    successor = await createSwarmNode({ rendezvous: { requestTimeoutMs: 1000 }, listen: [address] })
    assert.ok(!successor.peerId.equals(oldId))

    // The first ask may fail on the connection that was open when it stopped (the peer is suspected);
    // the question that follows a request timeout later goes over a new connection, to the successor.
    const entry: StoredEntry = { peerId: asker.peerId.toString(), expiration: Date.now() / 1000 + 60, looking: true, priority: 0, addrs: [] }
    const known = (): boolean => kadRoutingTable(asker.services.dht).closestPeers(target, { count: 20 }).some(p => p.equals(oldId))
    for (let i = 0; i < 20 && known(); i++) {
      const declared = await asker.services.rendezvous.declare(key, entry)
      assert.deepEqual(declared.map(e => e.peerId), [entry.peerId], 'the declaration is stored on the replicas that answer')
      await new Promise(resolve => setTimeout(resolve, 250))
    }
    assert.ok(!known(), 'the old id left the routing table')
    assert.equal(await asker.peerStore.has(oldId), false, 'and the peer store')
    const found = await others[0].services.rendezvous.find(key)
    assert.deepEqual(found.map(e => e.peerId), [entry.peerId], 'another peer finds the declaration')
  } finally {
    await Promise.allSettled([...nodes, ...(successor != null ? [successor] : [])].map(async n => { await n.stop() }))
  }
})
