import { test } from 'node:test'
import assert from 'node:assert/strict'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { createSwarmNode, type SwarmNode } from '../../../agent/net/node.js'
import { awaitFirstPeer, connectBootstrap } from '../../../agent/net/bootstrap.js'
import { StateSharing } from '../../../agent/state/state-sharing.js'
import { freePort } from '../../../agent/util/ports.js'
import { linesLog } from '../../../agent/log.js'
import { testLog } from '../test-log.js'

// A swarm's only bootstrap agent restarts (a rolling update, a preempted node; bootstrap.replicas
// defaults to 1). It has no bootstrap peers of its own to dial: the others must dial it again, or it
// finds no peer to load the swarm's state from and starts from its trainer's initial values, which
// its next rounds then mix into everyone's. The others keep their bootstrap peers alive (libp2p's
// KEEP_ALIVE tag, set by connectBootstrap), and the restarted agent waits for them before it looks.

const PREFIX = 'restart'
const sleep = async (ms: number): Promise<void> => { await new Promise(resolve => setTimeout(resolve, ms)) }

test('a restarted lone bootstrap agent is dialled again by the swarm and downloads its state from a peer', { timeout: 120_000 }, async () => {
  const key = await generateKeyPair('Ed25519')
  const port = await freePort()
  const listen = [`/ip4/127.0.0.1/tcp/${port}`]
  const nodes: SwarmNode[] = []
  const sharings: StateSharing[] = []
  try {
    const bootstrap = await createSwarmNode({ privateKey: key, listen, rendezvous: { requestTimeoutMs: 1000 } })
    const address = `${listen[0]}/p2p/${bootstrap.peerId.toString()}`
    nodes.push(bootstrap)
    for (let i = 0; i < 2; i++) {
      const node = await createSwarmNode({ listen: ['/ip4/127.0.0.1/tcp/0'], rendezvous: { requestTimeoutMs: 1000 } })
      nodes.push(node)
      assert.ok(await connectBootstrap(node, { peers: [address], dnsServers: [], log: linesLog(() => {}), signal: AbortSignal.timeout(20_000) }))
    }
    // The two members offer the swarm's state.
    const state = Float32Array.from({ length: 1000 }, (_, i) => i / 7)
    for (const [i, node] of nodes.slice(1).entries()) {
      const s = new StateSharing(node, { prefix: PREFIX, requestTimeoutMs: 1000, log: testLog(`member ${i}`) })
      sharings.push(s)
      await s.start(async () => ({ tensors: [{ name: 'w', shape: [1000], data: state }], metadata: { round: 7 } }))
    }
    await sleep(500)

    // The bootstrap agent's process dies; a new one comes back with the same identity and address.
    await bootstrap.stop()
    await sleep(1000)
    const restarted = await createSwarmNode({ privateKey: key, listen, rendezvous: { requestTimeoutMs: 1000 } })
    nodes.push(restarted)
    assert.equal(restarted.getConnections().length, 0, 'nobody is connected to the new process yet')
    const lone = new StateSharing(restarted, { prefix: PREFIX, requestTimeoutMs: 1000, log: testLog('restarted bootstrap'), peersFirst: async () => await awaitFirstPeer(restarted) })
    sharings.push(lone)
    const result = await lone.download([{ name: 'w', shape: [1000] }])
    assert.ok(result != null, 'the restarted bootstrap agent downloaded the swarm\'s state')
    assert.deepEqual(result.metadata, { round: 7 })
    assert.deepEqual([...result.tensors[0].data], [...state])
    assert.ok(nodes.slice(1, 3).some(n => n.peerId.toString() === result.donor))
  } finally {
    await Promise.allSettled(sharings.map(async s => { await s.stop() }))
    await Promise.allSettled(nodes.map(async n => { await n.stop() }))
  }
})

test('the members dial a restarted bootstrap agent again by themselves, within seconds', { timeout: 60_000 }, async () => {
  const key = await generateKeyPair('Ed25519')
  const listen = [`/ip4/127.0.0.1/tcp/${await freePort()}`]
  const nodes: SwarmNode[] = []
  try {
    const bootstrap = await createSwarmNode({ privateKey: key, listen, rendezvous: { requestTimeoutMs: 1000 } })
    nodes.push(bootstrap)
    for (let i = 0; i < 2; i++) {
      const node = await createSwarmNode({ listen: ['/ip4/127.0.0.1/tcp/0'], rendezvous: { requestTimeoutMs: 1000 } })
      nodes.push(node)
      assert.ok(await connectBootstrap(node, { peers: [`${listen[0]}/p2p/${bootstrap.peerId.toString()}`], dnsServers: [], log: linesLog(() => {}), signal: AbortSignal.timeout(20_000) }))
    }
    await bootstrap.stop()
    await sleep(1000)
    const restarted = await createSwarmNode({ privateKey: key, listen, rendezvous: { requestTimeoutMs: 1000 } })
    nodes.push(restarted)
    // Nothing else runs on the members (no rendezvous traffic that might reach it): only their redial can.
    assert.equal(await awaitFirstPeer(restarted, 8000), true, 'a member dialled the new process')
  } finally {
    await Promise.allSettled(nodes.map(async n => { await n.stop() }))
  }
})

test('awaitFirstPeer: at once when the routing table holds a peer, once a connection puts one there, or false after its bound', { timeout: 60_000 }, async () => {
  const a = await createSwarmNode({ listen: ['/ip4/127.0.0.1/tcp/0'], rendezvous: { requestTimeoutMs: 1000 } })
  const b = await createSwarmNode({ listen: ['/ip4/127.0.0.1/tcp/0'], rendezvous: { requestTimeoutMs: 1000 } })
  try {
    let started = Date.now()
    assert.equal(await awaitFirstPeer(a, 300), false)
    assert.ok(Date.now() - started >= 290)
    const waiting = awaitFirstPeer(a, 30_000)
    started = Date.now()
    await b.dial(a.getMultiaddrs()[0])
    assert.equal(await waiting, true)
    assert.ok(Date.now() - started < 10_000, 'resolved on the connection, not at the bound')
    assert.equal(await awaitFirstPeer(a, 30_000), true)
  } finally {
    await Promise.allSettled([a.stop(), b.stop()])
  }
})
