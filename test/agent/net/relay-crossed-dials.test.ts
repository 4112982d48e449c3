import { test } from 'node:test'
import assert from 'node:assert/strict'
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import { createSwarmNode, type SwarmNode } from '../../../agent/net/node.js'
import { newSwarmKeyText } from '../../../agent/net/pnet/index.js'
import { circuitAddrs } from '../../../agent/net/reach.js'
import { describeError } from '../../../agent/errors.js'

/** A relay on loopback and two members reachable only through their slots on it (as behind NAT). */
async function relayAndMembers (): Promise<{ relay: SwarmNode, a: SwarmNode, b: SwarmNode, stop: () => Promise<void> }> {
  const psk = new TextEncoder().encode(newSwarmKeyText())
  const relay = await createSwarmNode({ listen: ['/ip4/127.0.0.1/tcp/0'], psk, relay: { maxReservations: 4, circuitBytes: 1 << 30, circuitDurationMs: 60_000 } })
  const a = await createSwarmNode({ listen: [], psk })
  const b = await createSwarmNode({ listen: [], psk })
  const stop = async (): Promise<void> => { await Promise.allSettled([relay.stop(), a.stop(), b.stop()]) }
  try {
    for (const m of [a, b]) {
      await m.dial(relay.getMultiaddrs()[0])
      await m.services.internals.transportManager.listen([multiaddr(`${relay.getMultiaddrs()[0].toString()}/p2p-circuit`)])
      assert.equal(circuitAddrs(m).length, 1, 'the member reserved a slot')
    }
  } catch (err) {
    await stop()
    throw err
  }
  return { relay, a, b, stop }
}

const PROTOCOL = '/t/crossed'

// Members open streams to each other all at once at a round's start. Through one relay, a's
// circuit to b and b's circuit to a carry the same remote address, and libp2p took the one it had
// just dialled for a duplicate of the other and aborted it, under every other caller that had
// joined that dial: 'Remote closed connection during opening' (relay.test.ts, round 1). Without
// ./crossed-circuits.ts about one round in six failed so here.
test('crossed relayed dials: members dialling each other through the relay at once (one of them twice) all get their streams', { timeout: 120_000 }, async () => {
  const r = await relayAndMembers()
  try {
    for (const m of [r.a, r.b]) await m.handle(PROTOCOL, (stream) => { void stream.close() })
    const toB = multiaddr(circuitAddrs(r.b)[0])
    const toA = multiaddr(circuitAddrs(r.a)[0])
    const failures: string[] = []
    for (let round = 0; round < 30; round++) {
      const open = async (from: SwarmNode, to: Multiaddr, who: string): Promise<void> => {
        try {
          const stream = await from.dialProtocol(to, PROTOCOL, { signal: AbortSignal.timeout(10_000) })
          await stream.close()
        } catch (err) {
          failures.push(`round ${round} ${who}: ${describeError(err)}`)
        }
      }
      // Two callers on a share one dial (libp2p's dial queue joins them), as an agent's own
      // services and its averager do; b dials a at the same moment.
      await Promise.all([open(r.a, toB, 'a->b #1'), open(r.a, toB, 'a->b #2'), open(r.b, toA, 'b->a')])
      await Promise.all([r.a.hangUp(r.b.peerId), r.b.hangUp(r.a.peerId)])
    }
    assert.deepEqual(failures, [])
  } finally {
    await r.stop()
  }
})
