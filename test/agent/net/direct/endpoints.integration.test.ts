import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createSwarmNode, type SwarmNode } from '../../../../agent/net/node.js'
import { createServer, connect, type Server, type Socket } from 'node:net'
import { multiaddr } from '@multiformats/multiaddr'
import { dataEndpoints, directHostsOf, orderDirectHosts } from '../../../../agent/net/direct/endpoints.js'
import { MAX_DATA_ADDRS, dataAddrsToWire, dataEndpointsFromWire } from '../../../../agent/net/direct/data-addrs.js'
import { mainThreadTransport } from '../../../../agent/net/direct/direct-transport.js'
import type { DirectFrameChannel } from '../../../../agent/net/frame-channel.js'
import { AggregateDialer } from '../../../../agent/allreduce/aggregate-dialer.js'
import { aggregateProtocol, directAggregateProtocols } from '../../../../agent/allreduce/aggregate-protocol.js'
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

test('data endpoints: each host at the port its data addresses name, else at the data port; hosts only they name come after', () => {
  const named = [{ host: '203.0.113.7', port: 30101 }, { host: 'gw.example.com', port: 30102 }, { host: '203.0.113.7', port: 1 }]
  assert.deepEqual(dataEndpoints(['10.0.0.5', '203.0.113.7'], 31338, named), [
    { host: '10.0.0.5', port: 31338 }, { host: '203.0.113.7', port: 30101 }, { host: 'gw.example.com', port: 30102 }
  ], 'the first port named for a host wins')
  assert.deepEqual(dataEndpoints(['10.0.0.5'], 31338, []), [{ host: '10.0.0.5', port: 31338 }])
})

test('data addresses from the wire: bounded in number and size; what is not /host/tcp/port is skipped, never thrown', () => {
  const good = dataAddrsToWire([multiaddr('/ip4/203.0.113.7/tcp/30101'), multiaddr('/ip6/2001:db8::1/tcp/30102'), multiaddr('/dns4/gw.example.com/tcp/30103')])
  const bad = [new Uint8Array([0xff, 0xff, 0xff]), multiaddr('/ip4/1.2.3.4/udp/5').bytes, multiaddr('/ip4/1.2.3.4/tcp/0').bytes, multiaddr('/ip4/1.2.3.4').bytes, new Uint8Array(300)]
  assert.deepEqual(dataEndpointsFromWire([...bad, ...good]), [
    { host: '203.0.113.7', port: 30101 }, { host: '2001:db8::1', port: 30102 }, { host: 'gw.example.com', port: 30103 }
  ])
  assert.equal(dataEndpointsFromWire(Array.from({ length: 100 }, () => good[0])).length, MAX_DATA_ADDRS, 'at most MAX_DATA_ADDRS taken')
  assert.deepEqual(dataEndpointsFromWire(undefined), [])
})

/** A TCP port forward, as a router's DNAT or kube-proxy's node port: host:any port → to. */
async function portForward (host: string, to: { host: string, port: number }): Promise<{ port: number, server: Server, sockets: Socket[] }> {
  const sockets: Socket[] = []
  const server = createServer((inbound) => {
    const outbound = connect(to.port, to.host)
    sockets.push(inbound, outbound)
    inbound.pipe(outbound).pipe(inbound)
    inbound.on('error', () => outbound.destroy())
    outbound.on('error', () => inbound.destroy())
  })
  await new Promise<void>(resolve => server.listen(0, host, resolve))
  return { port: (server.address() as { port: number }).port, server, sockets }
}

test('direct hosts: a reducer whose data port is reached at another port (a node port) is dialled there, not left to libp2p', async () => {
  // The reducer's libp2p host is 127.77.0.12; its data server listens elsewhere (127.77.0.15, its
  // "pod" address, which it does not announce), and a forward on 127.77.0.12 leads there, as a node
  // port leads to a pod. Dialled at the data port on its libp2p host, the reducer answers nothing.
  const reducer = await createSwarmNode({ listen: ['/ip4/127.77.0.12/tcp/0'] })
  const sender = await createSwarmNode({ listen: ['/ip4/127.77.0.13/tcp/0'] })
  const server = await mainThreadTransport.listen({
    identity: await reducer.services.dataIdentity.create(), host: '127.77.0.15', port: 0,
    protocols: directAggregateProtocols('test'), maxFrameBytes: 1024, maxQueuedFrames: 4, handshakeTimeoutMs: 3000,
    accept: (channel) => { channel.abort(new Error('accepted')) }
  })
  const forward = await portForward('127.77.0.12', { host: '127.77.0.15', port: server.port })
  await reducer.handle(aggregateProtocol('test'), (stream) => { void stream.close() })
  try {
    await sender.dial(reducer.getMultiaddrs()[0])
    const lines: string[] = []
    const dialer = new AggregateDialer(sender as SwarmNode, 'test', await sender.services.dataIdentity.create(), mainThreadTransport, linesLog(line => lines.push(line), 'debug'))
    const options = { timeoutMs: 3000, maxFrameBytes: 1024, maxQueuedFrames: 4 }
    const withoutAddrs = await dialer.open(reducer.peerId.toString(), { dataPort: server.port, dataAddrs: [] } as never, options)
    assert.equal(withoutAddrs.kind, 'libp2p', 'nothing answers at the data port on the libp2p host')
    withoutAddrs.abort(new Error('done'))
    const dataAddrs = dataAddrsToWire([multiaddr(`/ip4/127.77.0.12/tcp/${forward.port}`)])
    const channel = await dialer.open(reducer.peerId.toString(), { dataPort: server.port, dataAddrs } as never, options)
    assert.equal(channel.kind, 'direct', lines.join('\n'))
    assert.deepEqual(dialer.opened, { direct: 1, libp2p: 1 })
    channel.abort(new Error('done'))
  } finally {
    for (const s of forward.sockets) s.destroy()
    forward.server.close()
    await server.close()
    await Promise.all([reducer.stop(), sender.stop()])
  }
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
