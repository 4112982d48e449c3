import { endianness } from 'node:os'
import { peerIdFromString } from '@libp2p/peer-id'
import type { SwarmNode } from '../net/node.js'
import type { StoredEntry } from '../rendezvous/store.js'
import type { NamedTensor } from '../averager.js'
import { atOwnAddress, ownAddrBytes, rememberAddrs } from '../net/rpc.js'
import { AveragingError, describeError } from '../errors.js'
import { StateHandler, type StateSource, type UploadOutcome } from './state-handler.js'
import { formatBytes, TransferProgress } from '../util/transfer-progress.js'
import { downloadFrom, openDirectState, openStateStream } from './state-download.js'
import type { DataChannelKind, FrameChannel } from '../net/frame-channel.js'
import { mainThreadTransport, type DirectEndpoint, type DirectTransport } from '../net/direct/direct-transport.js'
import type { DataChannelIdentity } from '../net/direct/identity.js'
import { dataAddrsToWire, dataEndpointsFromWire, type DataEndpoint } from '../net/direct/data-addrs.js'
import type { Multiaddr } from '@multiformats/multiaddr'
import { orderDonors } from './donor-order.js'
import { routingTableSize } from '../net/bootstrap.js'
import { DEFAULT_MAX_STATE_BYTES, directStateProtocols, donorKey, stateProtocol, type ExpectedTensor } from './state-protocol.js'
import type { Log } from '../log.js'

export type DownloadOutcome = 'success' | 'failed' | 'no_donors'

export interface StateSharingOptions {
  readonly prefix: string
  readonly requestTimeoutMs: number
  /** Downloads served at once; a newcomer beyond that hears "busy" and moves on (default 2). */
  readonly maxConcurrentUploads?: number
  /** Donors within this much of the best priority share the newcomers (default 2, e.g. steps). */
  readonly priorityMargin?: number
  /** Largest state a download allocates when no expected layout is given (default 2 GiB). */
  readonly maxStateBytes?: number
  /** Slowest download accepted from one donor before trying the next (default 1 MiB/s). */
  readonly minDownloadBytesPerSecond?: number
  /** Rounds over the donors that answered busy before giving up (default 3). */
  readonly busyRetries?: number
  /** Least time between two progress lines of a download (default 5 s; none for a download done sooner). */
  readonly progressIntervalMs?: number
  readonly log?: Log
  /**
   * Awaited before looking for donors (agent/main.ts: a lone bootstrap agent waits for the swarm's
   * agents to dial it again, agent/net/bootstrap.ts awaitFirstPeer); resolves whether peers are there.
   */
  readonly peersFirst?: () => Promise<boolean>
  /** For averaging_state_uploads_total: once per upload request, with how it ended. */
  readonly onUpload?: (outcome: UploadOutcome) => void
  /** For averaging_state_downloads_total{outcome}: once per download() call. */
  readonly onDownload?: (outcome: DownloadOutcome) => void
  /**
   * Download over a donor's direct data channel when it announces one (default true), else or when
   * it cannot be reached over a libp2p stream; false (AVS_DATA_CHANNEL libp2p): libp2p streams only.
   */
  readonly directChannel?: boolean
  /**
   * Where our data port is reached at another port, by host (AVS_ANNOUNCE_FILE's data entries: a
   * node port), announced with it; asked at every announcement, since the file may change.
   */
  readonly dataAddrs?: () => readonly Multiaddr[]
  /** Where a download's direct sockets live (default: this thread). */
  readonly directTransport?: DirectTransport
  /**
   * Whether start() serves at once (default true). A client-mode agent downloads the swarm's state
   * like any newcomer but nobody can dial it to download its own: false holds start()'s source until
   * serve() (the agent became reachable: a relay slot reserved after it joined).
   */
  readonly serving?: boolean
}

/** How far a download from one donor got: for a caller that shows it (the sidecar's GET /v1/status). */
export interface DownloadProgress {
  readonly donor: string
  readonly receivedBytes: number
  readonly totalBytes: number
  /** "downloading the swarm's state from …: 1.2 GiB of 4.0 GiB (30 %), 11.8 MB/s, about 4 min left" */
  readonly line: () => string
}

export interface DownloadResult {
  readonly tensors: NamedTensor[]
  readonly metadata: Record<string, unknown>
  readonly donor: string
  /** Which channel carried it. */
  readonly path: DataChannelKind
}

/** hivemind's declare_state_period: an announcement lives this long... */
const ANNOUNCE_TTL_S = 30
/** ...and is renewed this often, so a donor stays listed through a missed renewal. */
const ANNOUNCE_PERIOD_MS = 10_000

/**
 * hivemind's load_state_from_peers and rpc_download_state. Donors announce themselves under
 * `<prefix>.state` with a priority (the local step); a newcomer spreads over the near-best
 * donors instead of piling onto the single best one, and a donor at its upload limit redirects.
 */
export class StateSharing {
  private readonly protocol: string
  private readonly key: string
  private priority = 0
  private handler: StateHandler | null = null
  private timer: NodeJS.Timeout | undefined
  private announcing: Promise<void> = Promise.resolve()
  private stopped = false
  /** The direct data channel port we serve our state on too (0: none), and what stops serving it. */
  private dataPort = 0
  private stopDirect: (() => void) | undefined
  private identity: Promise<DataChannelIdentity> | undefined
  private serving: boolean
  /** What start() was given while not serving, for serve(). */
  private held: { source: StateSource, direct?: DirectEndpoint } | undefined

  constructor (private readonly node: SwarmNode, private readonly options: StateSharingOptions) {
    // Chunks carry the in-memory float32 bytes as the little-endian bytes the wire defines.
    if (endianness() !== 'LE') throw new AveragingError('state sharing needs a little-endian machine')
    this.protocol = stateProtocol(options.prefix)
    this.key = donorKey(options.prefix)
    this.serving = options.serving ?? true
  }

  /**
   * Serves our state to newcomers and announces us as a donor until stop(): over libp2p streams, and
   * over the direct data channel of `direct` (the averager's, when it has one).
   */
  async start (source: StateSource, direct?: DirectEndpoint): Promise<void> {
    if (this.handler != null || this.held !== undefined) throw new AveragingError('state sharing is already started')
    if (!this.serving) {
      this.held = direct !== undefined ? { source, direct } : { source }
      return
    }
    this.handler = new StateHandler(source, {
      requestTimeoutMs: this.options.requestTimeoutMs,
      maxConcurrentUploads: this.options.maxConcurrentUploads ?? 2,
      onUpload: this.options.onUpload,
      log: this.options.log
    })
    await this.handler.register(this.node, this.protocol)
    if (direct !== undefined && direct.port > 0) {
      this.stopDirect = this.handler.serveDirect(direct, directStateProtocols(this.options.prefix)[0])
      this.dataPort = direct.port
    }
    this.timer = setInterval(() => { void this.announce(true) }, ANNOUNCE_PERIOD_MS)
    this.timer.unref()
    await this.announce(true)
  }

  /**
   * Serves from now on (StateSharingOptions.serving): the source start() was given, if it was, over
   * `direct` (the data channel the agent listens on now) or the one start() was given.
   */
  async serve (direct?: DirectEndpoint): Promise<void> {
    if (this.serving || this.stopped) return
    this.serving = true
    const held = this.held
    this.held = undefined
    if (held !== undefined) await this.start(held.source, direct ?? held.direct)
  }

  /** Newcomers prefer donors with a higher priority; a change is announced at once. */
  async setPriority (priority: number): Promise<void> {
    if (!Number.isFinite(priority)) throw new AveragingError('the state-sharing priority must be a finite number')
    if (priority === this.priority) return
    this.priority = priority
    if (this.handler != null && !this.stopped) await this.announce(true)
  }

  get activeUploads (): number {
    return this.handler?.activeUploads ?? 0
  }

  /** Stops serving and withdraws the announcement, so newcomers stop trying us. */
  async stop (): Promise<void> {
    if (this.stopped) return
    this.stopped = true
    clearInterval(this.timer)
    if (this.handler == null) return
    this.stopDirect?.()
    await this.node.unhandle(this.protocol).catch(() => {})
    await this.announce(false)
  }

  /**
   * Downloads the current state from a donor: tries donors in spreading order until one serves
   * it, then goes back to the busy ones a few times. Null when none could.
   *
   * `into`: tensors of the expected layout, holding zeros, that the state is written into in place
   * (the sidecar's averager tensors: a 4 GB state is then not held twice); the result's tensors are
   * they. When no donor served the state whole they are zeros again.
   */
  async download (expected?: readonly ExpectedTensor[], onProgress?: (progress: DownloadProgress) => void, into?: readonly NamedTensor[]): Promise<DownloadResult | null> {
    if (into !== undefined && expected === undefined) throw new AveragingError('a download into given tensors needs their expected layout')
    let result: DownloadResult | null = null
    try {
      result = await this.tryDonors(expected, onProgress, into)
      return result
    } finally {
      // A donor that failed midway left part of its state there.
      if (result === null) for (const t of into ?? []) t.data.fill(0)
    }
  }

  private async tryDonors (expected: readonly ExpectedTensor[] | undefined, onProgress: ((progress: DownloadProgress) => void) | undefined, into: readonly NamedTensor[] | undefined): Promise<DownloadResult | null> {
    let entries: StoredEntry[]
    if (this.options.peersFirst !== undefined && routingTableSize(this.node) === 0) {
      this.options.log?.info('no peer connected yet: waiting for the swarm\'s agents to dial us before looking for its state')
      const connected = await this.options.peersFirst()
      this.options.log?.info(connected ? 'a peer connected: looking for the swarm\'s state' : 'no peer connected: nothing to download the swarm\'s state from')
    }
    try {
      entries = await this.findDonors()
    } catch (err) {
      this.options.log?.warn(`looking up state donors failed: ${describeError(err)}`)
      entries = []
    }
    if (entries.length === 0) {
      this.options.log?.info('no peer offers its state to download')
      this.options.onDownload?.('no_donors')
      return null
    }
    const ports = new Map<string, { port: number, dataAddrs: DataEndpoint[] }>()
    for (const entry of entries) {
      await rememberAddrs(this.node, peerIdFromString(entry.peerId), entry.addrs).catch(() => {})
      if (entry.dataPort !== undefined) ports.set(entry.peerId, { port: entry.dataPort, dataAddrs: dataEndpointsFromWire(entry.dataAddrs) })
    }
    let order = orderDonors(entries, this.options.priorityMargin ?? 2)
    const retries = this.options.busyRetries ?? 3
    for (let round = 0; round <= retries && order.length > 0; round++) {
      if (round > 0) await sleep((200 + Math.random() * 300) * round)
      const busy: string[] = []
      for (const donor of order) {
        const started = Date.now()
        let progress: TransferProgress | undefined
        try {
          const { channel, path } = await this.open(donor, ports.get(donor))
          const state = await downloadFrom(channel, donor, {
            requestTimeoutMs: this.options.requestTimeoutMs,
            maxStateBytes: this.options.maxStateBytes ?? DEFAULT_MAX_STATE_BYTES,
            minBytesPerSecond: this.options.minDownloadBytesPerSecond,
            expected,
            ...(into === undefined ? {} : { into: into.map(t => t.data) }),
            onProgress: (received, total) => {
              progress ??= new TransferProgress(`downloading the swarm's state from ${donor}`, total, line => { this.options.log?.info(line) }, this.options.progressIntervalMs)
              progress.update(received)
              onProgress?.({ donor, receivedBytes: received, totalBytes: total, line: () => progress!.line(received) })
            }
          })
          if (state === 'busy') {
            this.options.log?.debug(`state donor ${donor} is busy, trying the next one`)
            busy.push(donor)
            continue
          }
          const ms = Date.now() - started
          const bytes = state.tensors.reduce((n, t) => n + t.data.byteLength, 0)
          this.options.log?.info(`downloaded state from ${donor} in ${ms} ms (${formatBytes(bytes)}, ${(bytes / Math.max(ms, 1) / 1000).toFixed(1)} MB/s, ${path === 'direct' ? 'direct data channel' : 'libp2p stream'})`)
          this.options.onDownload?.('success')
          return { ...state, donor, path }
        } catch (err) {
          this.options.log?.warn(`state download from ${donor} failed: ${describeError(err)}`)
        }
      }
      order = busy
    }
    this.options.onDownload?.('failed')
    return null
  }

  /** A channel to the donor: its direct data channel when it announces one we may use, else a libp2p stream. */
  private async open (donor: string, direct: { port: number, dataAddrs: DataEndpoint[] } | undefined): Promise<{ channel: FrameChannel, path: DataChannelKind }> {
    if (direct !== undefined && this.options.directChannel !== false) {
      try {
        this.identity ??= this.node.services.dataIdentity.create()
        const dialer = { identity: await this.identity, transport: this.options.directTransport ?? mainThreadTransport }
        const channel = await openDirectState(this.node, donor, direct, directStateProtocols(this.options.prefix), dialer, this.options.requestTimeoutMs)
        return { channel, path: 'direct' }
      } catch (err) {
        this.options.log?.debug(`no direct data channel to state donor ${donor} (${describeError(err)}); using a libp2p stream`)
      }
    }
    return { channel: await openStateStream(this.node, donor, this.protocol, this.options.requestTimeoutMs), path: 'libp2p' }
  }

  /**
   * The donors listed under our key, ourselves and our previous process (same address, another
   * peer id) left out. A plain find first: it follows the closer peers the replicas name, which
   * reaches the key's replicas from a routing table still filling (a restarted agent asks at once).
   * The settled find's kad-dht lookup (up to a few request timeouts) only when it found nobody.
   */
  private async findDonors (): Promise<StoredEntry[]> {
    const self = this.node.peerId.toString()
    const donors = async (settled: boolean): Promise<StoredEntry[]> =>
      (await this.node.services.rendezvous.find(this.key, { settled }))
        .filter(e => e.looking && e.peerId !== self && !atOwnAddress(this.node, e.addrs))
    const found = await donors(false)
    return found.length > 0 ? found : await donors(true)
  }

  /** Serialised, so a later announcement never lands before an earlier one. */
  private async announce (looking: boolean): Promise<void> {
    const next = this.announcing.then(async () => {
      if (looking && this.stopped) return
      await this.node.services.rendezvous.declare(this.key, {
        peerId: this.node.peerId.toString(),
        expiration: Date.now() / 1000 + ANNOUNCE_TTL_S,
        looking,
        priority: this.priority,
        addrs: ownAddrBytes(this.node),
        ...(this.dataPort > 0 ? { dataPort: this.dataPort, dataAddrs: dataAddrsToWire(this.options.dataAddrs?.() ?? []) } : {})
      })
    }).catch((err: unknown) => {
      this.options.log?.debug(`announcing state donor failed: ${describeError(err)}`)
    })
    this.announcing = next
    await next
  }
}

async function sleep (ms: number): Promise<void> {
  await new Promise(resolve => setTimeout(resolve, ms))
}
