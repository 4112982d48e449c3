import { createLibp2p } from 'libp2p'
import { tcp } from '@libp2p/tcp'
import { tls } from '@libp2p/tls'
import { noise } from '@libp2p/noise'
import { identify, identifyPush } from '@libp2p/identify'
import { ping } from '@libp2p/ping'
import { kadDHT, passthroughMapper } from '@libp2p/kad-dht'
import { circuitRelayTransport } from '@libp2p/circuit-relay-v2'
import { dcutr } from '@libp2p/dcutr'
import { privateNetwork, type ProtectedConnection } from './pnet/index.js'
import { relayServer, type RelayServeOptions } from './relay.js'
import { isCircuit } from './reach.js'
import { keepCrossedCircuits } from './crossed-circuits.js'
import { guardedYamux } from './guarded-yamux.js'
import { rendezvous, type Rendezvous, type RendezvousInit } from '../rendezvous/rendezvous.js'
import { dataChannelIdentity, type DataChannelIdentities } from './direct/identity.js'
import { isPrivate } from '@libp2p/utils'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import type { Multiaddr } from '@multiformats/multiaddr'
import type { KadDHT } from '@libp2p/kad-dht'
import type { Identify } from '@libp2p/identify'
import type { Ping } from '@libp2p/ping'
import type { Libp2p, PrivateKey, Metrics, ConnectionEncrypter } from '@libp2p/interface'

/** Our own Kademlia namespace: agents never mix with IPFS's public DHT. */
export const DHT_PROTOCOL = '/avs/kad/1.0.0'

export type Encryption = 'tls' | 'noise'

export interface SwarmNodeOptions {
  readonly privateKey?: PrivateKey
  /** Multiaddrs to listen on, e.g. /ip4/127.0.0.1/tcp/0. */
  readonly listen: readonly string[]
  readonly announce?: readonly string[]
  /** Addresses announced before the others, read anew each time libp2p lists ours (an AnnounceFile's). */
  readonly announceExtra?: () => readonly Multiaddr[]
  /**
   * Connection encrypters in order of preference. Noise first, though @libp2p/tls moves ~2.6x
   * more bytes per second here: under bidirectional bulk traffic (exactly an all-reduce) the
   * TLS upgrader pauses reading while its writes are blocked, and two such peers can stall each
   * other for good (bench/README.md, "stalls"). A slower round beats a stuck one; bulk speed is
   * the direct data channel's job.
   */
  readonly encryption?: readonly Encryption[]
  /**
   * A libp2p private-network key (swarm.key v1 file): peers without it cannot connect. Our own
   * protector (./pnet), wire-compatible with @libp2p/pnet, whose 3.0.27 release breaks after
   * tens of MiB on a connection (pnet/README.md).
   */
  readonly psk?: Uint8Array
  /** Called with every connection the private-network key protects (byte counts for tests and metrics). */
  readonly onProtectedConnection?: (connection: ProtectedConnection) => void
  /** Only these peer ids may connect (checked after the encrypted handshake authenticated them). */
  readonly allowPeers?: readonly string[]
  readonly metrics?: (components: any) => Metrics
  /**
   * Start the DHT as a client and let the caller turn it server once it knows how it is reached
   * (main.ts after ./reach.ts). A server is put into routing tables at its first connection with
   * the addresses it announces then: an agent behind NAT would spread its private addresses,
   * which peers keep (the peer store merges them) and dial instead of the relay address it
   * reserves a moment later.
   */
  readonly dhtServerLater?: boolean
  /** Run a circuit relay v2 hop service for members (AVS_RELAY=serve), within these bounds. */
  readonly relay?: RelayServeOptions
  /**
   * In-process harnesses only (hundreds of agents in one process, bench/moshpit-scale.ts): libp2p's
   * in-memory transport, listening on /memory/<name>, with PLAINTEXT connections and no relay,
   * hole punching or connection pings, so that the harness measures the protocols and not the
   * crypto of one shared CPU. The agent never sets it.
   */
  readonly inMemory?: { readonly latencyMs?: number }
  /**
   * Multi-process harnesses only (bench/moshpit-scale.ts --procs): TCP on loopback with PLAINTEXT
   * connections and, as inMemory, no relay, hole punching or connection pings, so that agents spread
   * over several processes of one machine measure the protocols and not the crypto. The agent never sets it.
   */
  readonly plaintextTcp?: boolean
  /** The rendezvous service's request timeout, log and observer (default: the averager's default requestTimeout, no log). */
  readonly rendezvous?: RendezvousInit
}

/** What NodeInternals reaches of libp2p's address manager (libp2p 3's, not in its public types). */
interface AddressManagerInternals {
  confirmObservedAddr: (a: Multiaddr, o: { type: 'observed' | 'transport' }) => void
  getAddressesWithMetadata: () => Array<{ multiaddr: Multiaddr, verified: boolean, type: string }>
}

/** What the agent needs of libp2p's internals: listening on a relay at run time, which addresses it announces (./reach.ts). */
export interface NodeInternals {
  readonly transportManager: { listen: (addrs: Multiaddr[]) => Promise<void> }
  /** Marks an address (a NAT's, seen by peers) as ours to announce: for experiments with hole punching. */
  readonly confirmObservedAddr: (addr: Multiaddr) => void
  /**
   * Marks our public listen addresses as ours to announce; returns those it marked. libp2p 3
   * announces a listen address on a public IP only once AutoNAT confirmed it, which we do not run:
   * an agent on a public interface (a VM with a public IP, a global IPv6 address) announced nothing,
   * so peers' identify learnt no address, kad-dht left it out of every routing table, and a lone
   * bootstrap agent it joined waited out its wait for a first peer. Called once we know we are
   * reached at our own address (./reach.ts).
   */
  readonly confirmListenAddrs: () => Multiaddr[]
  /**
   * true: announce only /p2p-circuit and public addresses. An agent reached through a relay sits
   * behind NAT; its private addresses mislead every peer outside its LAN (a dial to one hangs until libp2p's
   * 6 s per-address timeout where a NAT drops it, before the relay address is tried) and, once
   * it announced both, peers learnt only the private one from the DHT and never reached it.
   */
  announceRelayOnly: (on: boolean) => void
  /**
   * What the identify libp2p runs on every new connection told us of it: the address the peer sees
   * us at (undefined where it sent none); absent until that identify finished. ./reach.ts reads it
   * rather than running identify again on a connection whose own identify is still under way (the
   * peer takes one at a time and closes the second unread: a restarted agent's retry after 250 ms
   * was most of its 0.3 s to decide how it is reached).
   */
  readonly identified: (connectionId: string) => { readonly observedAddr?: Multiaddr } | undefined
}

/**
 * An agent's libp2p node. Besides libp2p's own services it runs the agent's rendezvous (shared by
 * the averager and state sharing, started and stopped with the node) and hands out the direct data
 * channel's certificates (bound to the node's identity key).
 */
export type SwarmNode = Libp2p<{ dht: KadDHT, identify: Identify, ping: Ping, internals: NodeInternals, rendezvous: Rendezvous, dataIdentity: DataChannelIdentities }>

/** A libp2p node tuned for averaging: yamux windows that grow, a private DHT that serves on LANs, generous connection limits. */
export async function createSwarmNode (options: SwarmNodeOptions): Promise<SwarmNode> {
  const privateKey = options.privateKey ?? await generateKeyPair('Ed25519')
  const encrypters: Array<(components: any) => ConnectionEncrypter> = []
  for (const name of options.encryption ?? ['noise', 'tls']) encrypters.push(name === 'tls' ? tls() : noise())
  const inMemory = options.inMemory
  const harnessOnly = inMemory != null || options.plaintextTcp === true
  // Loaded only for a harness: both are development dependencies, absent from the agent image.
  const harness = harnessOnly
    ? { memory: inMemory != null ? (await import('@libp2p/memory')).memory : null, plaintext: (await import('@libp2p/plaintext')).plaintext }
    : null
  let relayOnly = false
  const allow = options.allowPeers != null && options.allowPeers.length > 0 ? new Set(options.allowPeers) : null
  const self = `/p2p/${peerIdFromPrivateKey(privateKey).toString()}`
  const extra = options.announceExtra
  const node = await createLibp2p({
    privateKey,
    addresses: {
      listen: [...options.listen],
      announce: options.announce != null ? [...options.announce] : undefined,
      // Exposed agents (spec.network.expose): the outside address first, the pod's own still after it
      // for peers in the cluster. An agent behind NAT with a relay slot announces only its circuit
      // and public addresses (./reach.ts).
      announceFilter: (addrs) => {
        const exposed = extra == null ? addrs : [...extra().map(a => a.encapsulate(self)), ...addrs.filter(a => !extra().some(e => a.equals(e.encapsulate(self))))]
        return relayOnly ? exposed.filter(a => isCircuit(a) || !isPrivate(a)) : exposed
      }
    },
    // Every agent can dial /p2p-circuit addresses (members behind NAT); it listens on one only
    // once it finds itself unreachable (./reach.ts). Two members dialling each other through the
    // relay at once keep both circuits (./crossed-circuits.ts).
    transports: harness?.memory != null ? [harness.memory({ latency: inMemory?.latencyMs ?? 0 })] : harness != null ? [tcp()] : [tcp(), keepCrossedCircuits(circuitRelayTransport())],
    connectionEncrypters: harness != null ? [harness.plaintext()] : encrypters,
    streamMuxers: [guardedYamux({
      enableKeepAlive: true,
      streamOptions: {
        // yamux's own starting window, grown while the reader keeps up (a state transfer's stream
        // to 16 MiB, for long round trips); the aggregate streams cap theirs lower
        // (AGGREGATE_RECEIVE_WINDOW in agent/allreduce/aggregate-protocol.ts says why).
        initialStreamWindowSize: 256 * 1024,
        maxStreamWindowSize: 16 * 1024 * 1024,
        maxReadBufferLength: 64 * 1024 * 1024
      }
    })],
    connectionProtector: options.psk != null ? privateNetwork({ psk: options.psk, onConnection: options.onProtectedConnection }) : undefined,
    connectionGater: allow == null
      ? undefined
      : {
          // Outbound we know the peer before dialling; inbound only once the handshake proved who it is.
          denyDialPeer: (peer) => !allow.has(peer.toString()),
          denyInboundEncryptedConnection: (peer) => !allow.has(peer.toString()),
          denyOutboundEncryptedConnection: (peer) => !allow.has(peer.toString()),
          // A relay reserves slots for and joins circuits between members only. Both already hold
          // a connection that passed the key and this list; checked again because the relay is
          // the one place that forwards bytes for others.
          denyInboundRelayReservation: (peer) => !allow.has(peer.toString()),
          denyOutboundRelayedConnection: (source, destination) => !allow.has(source.toString()) || !allow.has(destination.toString())
        },
    connectionManager: {
      maxConnections: 1000,
      // Many agents share one host in tests and on big nodes: the default 5/s per host throttles them.
      inboundConnectionThreshold: 10_000,
      maxIncomingPendingConnections: 256
    },
    // A ping stuck behind megabytes of tensor parts is no sign of a dead peer: do not abort
    // busy connections on ping timeouts (seen mid-transfer at 4 x 25M floats).
    // In memory nothing is lost in transit, and thousands of connections in one process pinging
    // every few seconds would measure the pings.
    connectionMonitor: harnessOnly ? { enabled: false } : { abortConnectionOnPingFailure: false },
    metrics: options.metrics,
    services: {
      identify: identify(),
      // Agents start as DHT clients and turn server once reachable: the push tells peers already
      // connected (the bootstrap agent first) that they now speak kad-dht, so their routing tables
      // take them. Without it the bootstrap agent's table stayed empty, it asked only itself for
      // a key's replicas, and the rest of a 4-agent swarm grouped without it (restore test).
      identifyPush: identifyPush(),
      ping: ping(),
      internals: (components: Pick<NodeInternals, 'transportManager'> & { addressManager: AddressManagerInternals, events: Pick<Libp2p, 'addEventListener'> }): NodeInternals => ({
        transportManager: components.transportManager,
        identified: identifiedConnections(components.events),
        confirmObservedAddr: (addr) => { components.addressManager.confirmObservedAddr(addr, { type: 'observed' }) },
        confirmListenAddrs: () => {
          const pending = components.addressManager.getAddressesWithMetadata().filter(a => a.type === 'transport' && !a.verified).map(a => a.multiaddr)
          for (const addr of pending) components.addressManager.confirmObservedAddr(addr, { type: 'transport' })
          return pending
        },
        announceRelayOnly: (on) => { relayOnly = on }
      }),
      // Upgrades a relayed connection to a direct one where the NATs let it (hole punching).
      ...(harnessOnly ? {} : { dcutr: dcutr() }),
      ...(options.relay != null ? { relay: relayServer(options.relay) } : {}),
      dht: kadDHT({
        protocol: DHT_PROTOCOL,
        clientMode: options.dhtServerLater === true,
        // Agents live on private networks (pods, loopback): keep their private addresses.
        peerInfoMapper: passthroughMapper,
        allowQueryWithZeroPeers: true,
        initialQuerySelfInterval: 200
      }),
      // Reads the routing table of the kad-dht service above, which it finds under the name `dht`.
      rendezvous: rendezvous(options.rendezvous),
      dataIdentity: dataChannelIdentity()
    }
  })
  return node as unknown as SwarmNode
}

/** Remembers, per open connection, what libp2p's identify on it reported (NodeInternals.identified). */
function identifiedConnections (events: Pick<Libp2p, 'addEventListener'>): NodeInternals['identified'] {
  const seen = new Map<string, { observedAddr?: Multiaddr }>()
  events.addEventListener('peer:identify', (evt) => {
    const { connection, observedAddr } = evt.detail
    // An identify push (a peer's addresses or protocols changed) carries no observed address: keep the one we had.
    if (connection.status !== 'open' || (observedAddr === undefined && seen.has(connection.id))) return
    seen.set(connection.id, observedAddr !== undefined ? { observedAddr } : {})
  })
  events.addEventListener('connection:close', (evt) => { seen.delete(evt.detail.id) })
  return (connectionId) => seen.get(connectionId)
}
