import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createSwarmNode, type SwarmNode } from '../../../agent/net/node.js'
import { natObserved } from '../../../agent/net/reach.js'

// How an agent tells whether it is behind NAT: the address its peers see it at, from the identify
// libp2p runs on every new connection. Asking again on a connection whose identify is still under way
// got our stream closed unread and a retry 250 ms later (0.29 s of a restarted agent's way back), so
// natObserved reads what libp2p's own identify reported (NodeInternals.identified).

test('natObserved reads the observed address libp2p\'s own identify reported, without an identify of its own', async () => {
  const nodes: SwarmNode[] = []
  try {
    const member = await createSwarmNode({ listen: ['/ip4/127.0.0.1/tcp/0'] })
    const peer = await createSwarmNode({ listen: ['/ip4/127.0.0.1/tcp/0'] })
    nodes.push(member, peer)
    const identified = new Promise<void>(resolve => { member.addEventListener('peer:identify', () => { resolve() }, { once: true }) })
    const connection = await member.dial(peer.getMultiaddrs()[0])
    await identified
    const seen = member.services.internals.identified(connection.id)
    assert.ok(seen?.observedAddr !== undefined, 'the identify libp2p ran as the connection opened is kept for it')
    assert.match(seen.observedAddr.toString(), /^\/ip4\/127\.0\.0\.1\/tcp\/\d+/)
    let asked = 0
    const identify = member.services.identify.identify.bind(member.services.identify)
    member.services.identify.identify = async (...args) => { asked++; return await identify(...args) }
    const { behindNat, observed, errors } = await natObserved(member, AbortSignal.timeout(5000))
    assert.equal(behindNat, false, 'a peer on the same host sees us at our own address')
    assert.deepEqual(observed, [seen.observedAddr.toString()])
    assert.deepEqual(errors, [])
    assert.equal(asked, 0, 'no identify stream of our own on a connection libp2p already identified')
    await member.hangUp(peer.peerId)
    assert.equal(member.services.internals.identified(connection.id), undefined, 'a closed connection is forgotten')
  } finally {
    await Promise.all(nodes.map(async n => { await n.stop() }))
  }
})
