import { test } from 'node:test'
import assert from 'node:assert/strict'
import { multiaddr } from '@multiformats/multiaddr'
import { createSwarmNode, type SwarmNode } from '../../../agent/net/node.js'
import { newSwarmKeyText } from '../../../agent/net/pnet/index.js'
import { circuitAddrs, isCircuit } from '../../../agent/net/reach.js'

const MIB = 1024 * 1024

/** A relay and two members on loopback, the second reachable only through its relay slot. */
async function relayAndMembers (circuitBytes: number): Promise<{ relay: SwarmNode, a: SwarmNode, b: SwarmNode, relayed: () => number, stop: () => Promise<void> }> {
  const psk = new TextEncoder().encode(newSwarmKeyText())
  let relayed = 0
  const relay = await createSwarmNode({ listen: ['/ip4/127.0.0.1/tcp/0'], psk, relay: { maxReservations: 4, circuitBytes, circuitDurationMs: 60_000, onRelayed: (n) => { relayed += n } } })
  const a = await createSwarmNode({ listen: ['/ip4/127.0.0.1/tcp/0'], psk })
  const b = await createSwarmNode({ listen: [], psk })
  const stop = async (): Promise<void> => { await Promise.allSettled([relay.stop(), a.stop(), b.stop()]) }
  try {
    await b.dial(relay.getMultiaddrs()[0])
    await a.dial(relay.getMultiaddrs()[0])
    await b.services.internals.transportManager.listen([multiaddr(`${relay.getMultiaddrs()[0].toString()}/p2p-circuit`)])
    assert.equal(circuitAddrs(b).length, 1, 'b reserved a slot')
  } catch (err) {
    await stop()
    throw err
  }
  return { relay, a, b, relayed: () => relayed, stop }
}

/** Sends `mib` MiB on a new stream to b's circuit address; resolves with what b received. */
async function send (a: SwarmNode, b: SwarmNode, mib: number): Promise<{ received: number, error?: string }> {
  let received = 0
  let ended: () => void = () => {}
  const end = new Promise<void>(resolve => { ended = resolve })
  await b.handle('/t/bulk', (stream) => {
    stream.addEventListener('message', (e) => { received += e.data.byteLength })
    stream.addEventListener('remoteCloseWrite', () => { void stream.close() })
    stream.addEventListener('close', () => { ended() })
  }, { force: true })
  try {
    const stream = await a.dialProtocol(multiaddr(circuitAddrs(b)[0]), '/t/bulk')
    for (let i = 0; i < mib * 16; i++) {
      if (!stream.send(new Uint8Array(64 * 1024).fill(i & 255))) await stream.onDrain({ signal: AbortSignal.timeout(10_000) })
    }
    await stream.close({ signal: AbortSignal.timeout(10_000) })
    // Everything sent has arrived once b's side of the stream closes.
    await Promise.race([end, new Promise(resolve => setTimeout(resolve, 10_000))])
    return { received }
  } catch (err) {
    return { received, error: (err as Error).message }
  }
}

test('a relayed connection carries members\' bytes, counted on the relay, and is not limited (streams need no runOnLimitedConnection)', { timeout: 60_000 }, async () => {
  const r = await relayAndMembers(64 * MIB)
  try {
    const out = await send(r.a, r.b, 8)
    assert.equal(out.error, undefined)
    assert.equal(out.received, 8 * MIB)
    // The bytes went through the relay. b may meanwhile have dialled a directly (DCUtR: a listens on
    // loopback), so a can hold a direct connection beside the circuit; the circuit is the one checked.
    assert.ok(r.relayed() >= 8 * MIB, `the relay counted ${r.relayed()} bytes`)
    const circuits = r.a.getConnections(r.b.peerId).filter(c => isCircuit(c.remoteAddr))
    for (const conn of circuits) assert.equal(conn.limits, undefined, 'libp2p sees no limits: it reuses the connection for later dials')
  } finally {
    await r.stop()
  }
})

test('the relay closes a circuit past its byte budget; the members dial a fresh one', { timeout: 60_000 }, async () => {
  const r = await relayAndMembers(2 * MIB)
  try {
    const over = await send(r.a, r.b, 8)
    assert.ok(over.received < 8 * MIB, `the circuit stopped early (${over.received} bytes arrived${over.error != null ? `; ${over.error}` : ''})`)
    await new Promise(resolve => setTimeout(resolve, 500))
    const again = await send(r.a, r.b, 1)
    assert.equal(again.error, undefined)
    assert.equal(again.received, 1 * MIB, 'a new circuit carries the next transfer')
  } finally {
    await r.stop()
  }
})
