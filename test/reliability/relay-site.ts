// One site of test/reliability/relay.test.ts: real agents (libp2p node, reachability, averager),
// run inside a network namespace by `ip netns exec <ns> node relay-site.js <json>`. Commands come
// one per stdin line (step, stats, dial <multiaddr>, stop); results go out as JSON lines.
import { createInterface } from 'node:readline'
import { privateKeyFromProtobuf } from '@libp2p/crypto/keys'
import { multiaddr } from '@multiformats/multiaddr'
import { createSwarmNode, type SwarmNode } from '../../agent/net/node.js'
import { settleRoutingTable } from '../../agent/net/bootstrap.js'
import { establishReachability, isCircuit, modeFor, type Reachability } from '../../agent/net/reach.js'
import { ConnectionKinds } from '../../agent/net/connection-kinds.js'
import { DecentralizedAverager, DEFAULT_AVERAGER_CONFIG } from '../../agent/averager.js'
import { describeError } from '../../agent/errors.js'
import { fill } from '../agent/swarm-fixture.js'
import { linesLog } from '../../agent/log.js'

export interface SiteAgent {
  /** Base64 protobuf private key (the parent builds the allow list from them). */
  readonly key: string
  readonly ip: string
  readonly seed: number
  /** Serve as a relay with this many slots. */
  readonly relaySlots?: number
}

export interface SiteConfig {
  /** swarm.key text; outsiders get another one. */
  readonly psk: string
  readonly allow: readonly string[]
  readonly bootstrap?: string
  readonly elements: number
  readonly groupSize: number
  readonly agents: readonly SiteAgent[]
  /** Outsiders only dial (the `dial` command); they run no averager. */
  readonly outsider?: boolean
}

const config = JSON.parse(process.argv[2]) as SiteConfig
const say = (line: object): void => { process.stdout.write(JSON.stringify(line) + '\n') }

interface Running { node: SwarmNode, kinds: ConnectionKinds, reach?: Reachability, averager?: DecentralizedAverager, relayed: Map<string, number>, protectedRelayed: number[], warnings: string[] }

async function startAgent (a: SiteAgent, index: number): Promise<Running> {
  const relayed = new Map<string, number>()
  // Relayed connections the private-network protector wrapped: the inner connection too must
  // pass the key, not only the hop to the relay.
  const protectedRelayed: number[] = []
  const node = await createSwarmNode({
    privateKey: privateKeyFromProtobuf(Buffer.from(a.key, 'base64')),
    listen: [`/ip4/${a.ip}/tcp/4001`],
    psk: new TextEncoder().encode(config.psk),
    allowPeers: config.allow,
    dhtServerLater: true,
    // The averager's requestTimeout below (3 s).
    rendezvous: { requestTimeoutMs: 3000, ...(process.env.AVS_TEST_LOG !== undefined ? { log: linesLog((m) => { process.stderr.write(`[${index}] ${m}\n`) }) } : {}) },
    onProtectedConnection: (c) => { if (isCircuit(c.remoteAddr)) protectedRelayed.push(1) },
    relay: a.relaySlots !== undefined
      ? { maxReservations: a.relaySlots, circuitBytes: 1 << 30, circuitDurationMs: 600_000, onRelayed: (bytes, source) => { relayed.set(source, (relayed.get(source) ?? 0) + bytes) } }
      : undefined
  })
  const kinds = new ConnectionKinds(node)
  const running: Running = { node, kinds, relayed, protectedRelayed, warnings: [] }
  if (config.outsider === true) return running
  // As agent/main.ts joins: connect, learn how we are reached (and turn the DHT server unless
  // nobody can reach us), then let the routing table fill.
  if (config.bootstrap !== undefined) await node.dial(multiaddr(config.bootstrap), { signal: AbortSignal.timeout(10_000) })
  running.reach = await establishReachability(node, 'auto', { announced: false, bootstrapped: config.bootstrap !== undefined }, linesLog((m) => { say({ type: 'log', index, m }) }))
  if (running.reach.kind !== 'unreachable') await node.services.dht.setMode('server')
  if (config.bootstrap !== undefined) await settleRoutingTable(node, 4000, 500)
  // Experiment (not run by the test): announce the addresses our NAT showed peers, so DCUtR has
  // something to punch to (libp2p keeps observed addresses unconfirmed without AutoNAT).
  if (process.env.AVS_TEST_CONFIRM_OBSERVED !== undefined && running.reach.kind === 'relayed') {
    for (const c of node.getConnections()) {
      const observed = await node.services.identify.identify(c).then(r => r.observedAddr, () => undefined)
      if (observed != null && !isCircuit(observed)) node.services.internals.confirmObservedAddr(observed.decapsulateCode(421))
    }
    say({ type: 'log', index, m: `announcing ${node.getMultiaddrs().map(String).join(', ')}` })
  }
  const mode = modeFor(running.reach, 'node')
  running.averager = await DecentralizedAverager.create(node, [{ name: 'w', shape: [config.elements], data: fill(config.elements, a.seed) }], {
    ...DEFAULT_AVERAGER_CONFIG,
    prefix: 'relay',
    mode,
    targetGroupSize: config.groupSize,
    minGroupSize: config.groupSize,
    averagingExpiration: 4,
    requestTimeout: 3,
    // The first round opens the relayed connections (hop, key, noise, yamux: several round trips
    // through the relay) on 2 busy cores: give a sender 15 s to show up.
    allreduceTimeout: 40,
    senderTimeout: 15,
    // Several parts per reducer, so parts cross the relay between the sites.
    partSizeBytes: 16 * 1024
  }, {
    // Warnings (a sender left out, a reducer's span kept local, and why) go into the step's report;
    // everything goes to stderr with AVS_TEST_LOG.
    log: linesLog((m) => {
      if (process.env.AVS_TEST_LOG !== undefined) process.stderr.write(`[${index} ${node.peerId.toString().slice(-6)}] ${m}\n`)
      if (!m.startsWith('debug ') && !m.startsWith('info ')) running.warnings.push(m)
    }, process.env.AVS_TEST_LOG !== undefined ? 'debug' : 'warn')
  })
  return running
}

const agents: Running[] = []
for (const [i, a] of config.agents.entries()) agents.push(await startAgent(a, i))
for (const [i, r] of agents.entries()) say({ type: 'ready', index: i, peerId: r.node.peerId.toString(), reach: r.reach, addrs: r.node.getMultiaddrs().map(String) })

async function command (line: string): Promise<void> {
  const [cmd, arg] = line.trim().split(' ', 2)
  if (cmd === 'step') {
    await Promise.all(agents.map(async (r, index) => {
      const started = Date.now()
      try {
        const res = await r.averager!.step({ timeout: 60 })
        const values = await r.averager!.withTensors(ts => Buffer.from(ts[0].data.buffer, ts[0].data.byteOffset, ts[0].data.byteLength).toString('base64'))
        say({ type: 'step', index, peerId: r.node.peerId.toString(), groupId: res.groupId, peers: res.peers, ms: Date.now() - started, failedReducers: res.allreduce.failedReducers, bannedSenders: res.allreduce.bannedSenders, parts: [res.allreduce.partsTotal, res.allreduce.partsReduced, res.allreduce.partsKeptLocal], bytes: [res.allreduce.bytesSent, res.allreduce.bytesReceived], values, dataChannel: r.averager!.dataChannel.opened, warnings: r.warnings.splice(0) })
      } catch (err) {
        say({ type: 'step', index, error: describeError(err), ms: Date.now() - started })
      }
    }))
  } else if (cmd === 'stats') {
    for (const [index, r] of agents.entries()) {
      const byPeer = Object.fromEntries(r.node.getConnections().map(c => [c.remotePeer.toString(), r.kinds.kindsOf(c.remotePeer.toString())]))
      say({ type: 'stats', index, open: r.kinds.open(), opened: r.kinds.opened, protectedRelayed: r.protectedRelayed.length, byPeer, relayed: Object.fromEntries(r.relayed) })
    }
  } else if (cmd === 'dial') {
    for (const [index, r] of agents.entries()) {
      const started = Date.now()
      try {
        await r.node.dial(multiaddr(arg), { signal: AbortSignal.timeout(8000) })
        say({ type: 'dial', index, target: arg, ok: true, ms: Date.now() - started })
      } catch (err) {
        say({ type: 'dial', index, target: arg, ok: false, error: describeError(err).slice(0, 300), ms: Date.now() - started })
      }
    }
  } else if (cmd === 'stop') {
    await Promise.allSettled(agents.map(async r => { await r.averager?.shutdown(); r.kinds.stop(); await r.node.stop() }))
    say({ type: 'stopped' })
    process.exit(0)
  }
  say({ type: 'done', cmd })
}

// Commands run one at a time, in order.
let queue = Promise.resolve()
createInterface({ input: process.stdin }).on('line', (line) => { queue = queue.then(async () => { await command(line) }) })
process.stdin.on('end', () => { process.exit(0) })
