import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createSwarmNode, type SwarmNode } from '../../../../agent/net/node.js'
import { directHostsOf, orderDirectHosts } from '../../../../agent/net/direct/endpoints.js'
import { mainThreadTransport } from '../../../../agent/net/direct/direct-transport.js'
import type { DirectFrameChannel } from '../../../../agent/net/frame-channel.js'
import { AggregateDialer } from '../../../../agent/allreduce/aggregate-dialer.js'
import { directAggregateProtocols } from '../../../../agent/allreduce/aggregate-protocol.js'
import { linesLog } from '../../../../agent/log.js'

// Where a sender looks for a reducer's direct data channel. A connection the reducer opened to us
// comes from its source address, which is where it listens only when it has one address: here each
// node listens at its own 127.77.0.x while its dials leave from 127.0.0.1 (as in the chaos harness,
// or a peer whose egress is SNATed). The sender must try where the reducer listens first.

test('direct hosts: the host that worked last, then our own dials, then announced addresses, then inbound source addresses', () => {
  const sources = { outbound: ['10.0.0.2'], announced: ['10.0.0.2', '192.0.2.7'], inbound: ['198.51.100.1', '10.0.0.2'] }
  assert.deepEqual(orderDirectHosts(sources), ['10.0.0.2', '192.0.2.7', '198.51.100.1'])
  assert.deepEqual(orderDirectHosts(sources, '198.51.100.1'), ['198.51.100.1', '10.0.0.2', '192.0.2.7'])
  assert.deepEqual(orderDirectHosts({ outbound: [], announced: [], inbound: ['198.51.100.1'] }), ['198.51.100.1'])
})

async function until (what: string, ok: () => Promise<boolean> | boolean): Promise<void> {
  const deadline = Date.now() + 5000
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise(resolve => setTimeout(resolve, 20))
  }
}

test('direct hosts: a reducer that dialled us from another address than it listens at is reached where it listens, at the first try', async () => {
  const reducer = await createSwarmNode({ listen: ['/ip4/127.77.0.2/tcp/0'] })
  const sender = await createSwarmNode({ listen: ['/ip4/127.77.0.3/tcp/0'] })
  const accepted: DirectFrameChannel[] = []
  const server = await mainThreadTransport.listen({
    identity: await reducer.services.dataIdentity.create(), host: '127.77.0.2', port: 0,
    protocols: directAggregateProtocols('test'), maxFrameBytes: 1024, maxQueuedFrames: 4, handshakeTimeoutMs: 3000,
    accept: (channel) => { accepted.push(channel) }
  })
  try {
    await reducer.dial(sender.getMultiaddrs()[0])
    const inbound = (): string[] => sender.getConnections(reducer.peerId).map(c => c.remoteAddr.toString())
    await until('the reducer\'s connection', () => inbound().length > 0)
    assert.match(inbound()[0], /^\/ip4\/127\.0\.0\.1\//, 'the reducer\'s connection comes from 127.0.0.1, not where it listens')
    await until('identify to store the reducer\'s addresses', async () => await sender.peerStore.get(reducer.peerId).then(p => p.addresses.length > 0, () => false))
    assert.deepEqual(await directHostsOf(sender, reducer.peerId), ['127.77.0.2', '127.0.0.1'], 'the announced address before the source address')

    const lines: string[] = []
    const dialer = new AggregateDialer(sender as SwarmNode, 'test', await sender.services.dataIdentity.create(), mainThreadTransport, linesLog(line => lines.push(line), 'debug'))
    const channel = await dialer.open(reducer.peerId.toString(), { dataPort: server.port } as never, { timeoutMs: 3000, maxFrameBytes: 1024, maxQueuedFrames: 4 })
    assert.equal(channel.kind, 'direct')
    assert.deepEqual(dialer.opened, { direct: 1, libp2p: 0 })
    assert.deepEqual(lines.filter(l => l.includes('no direct channel')), [], 'no dial went to the source address first')
    await channel.write(new Uint8Array([7]))
    await until('the reducer to accept', () => accepted.length === 1)
    assert.deepEqual(await accepted[0].read(2000), new Uint8Array([7]))
    channel.abort(new Error('done'))

    // Once a host worked, it comes first whatever the connections say.
    assert.deepEqual(await directHostsOf(sender, reducer.peerId, '127.0.0.1'), ['127.0.0.1', '127.77.0.2'])
  } finally {
    await server.close()
    await Promise.all([reducer.stop(), sender.stop()])
  }
})
