import type { SwarmNode } from './net/node.js'
import { Matchmaker } from './matchmaking/matchmaker.js'
import { MAX_GATHER_BYTES, MAX_ROUND, validRound } from './matchmaking/group-info.js'
import { AggregateRouter } from './allreduce/aggregate-handler.js'
import { AllReduceRunner, type AllReduceOptions, type AllReduceResult } from './allreduce/runner.js'
import { planRepair, withRepair, type SpanRepair } from './allreduce/repair.js'
import { AggregateDialer } from './allreduce/aggregate-dialer.js'
import type { DataChannelKind, DirectFrameChannel } from './net/frame-channel.js'
import type { DataChannelIdentity } from './net/direct/identity.js'
import { mainThreadTransport, type DirectEndpoint, type DirectListener, type DirectListenOptions, type DirectTransport } from './net/direct/direct-transport.js'
import { directStateProtocols } from './state/state-protocol.js'
import { DataThreads } from './net/direct/threads/data-threads.js'
import { aggregateProtocol, directAggregateProtocols, maxPartFrameBytes, PART_WINDOW } from './allreduce/aggregate-protocol.js'
import { elementsPerPart } from './allreduce/partition.js'
import { codecFor, type Codec, type CompressionChoice, type CompressionName } from './compression/index.js'
import { CodecClock, chooseCodec, type AutoCodec } from './adapt/codec-choice.js'
import { netBytes, peakWindowRate, shortRound, smoothRate, SAMPLE_MS, type ByteSample } from './adapt/link-rate.js'
import { bitsFromKey, groupKey, isGroupBits, nextGroupBits } from './moshpit/group-bits.js'
import { schemaHash, subsetOf, subsetSchemaHash, subsetTag, elementCount, type TensorSchema } from './schema.js'
import { DeltaBase, isDeltaRound, sharedBase } from './allreduce/delta-base.js'
import { OuterStates, applyOuterStep, outerSchemaHash, planOuterStep, stateIndices, type OuterAveraged, type OuterPlan, type OuterStateSnapshot, type OuterStep } from './outer/outer-step.js'
import { containerMemoryBytes } from './util/memory.js'
import { PeerMode, type PeerInfo } from './proto/averaging.js'
import { groupIdHex, type GroupInfo } from './matchmaking/group-info.js'
import { AveragingError, MatchmakingError, describeError } from './errors.js'
import { Mutex } from './util/mutex.js'
import { untilOrDeadline } from './util/wakeable-sleep.js'
import { SETTLE_MAX_MS } from './net/bootstrap.js'
import type { ArrivalClock } from './matchmaking/arrivals.js'
import { ownAddrBytes, rememberAddrs } from './net/rpc.js'
import { dataAddrsToWire } from './net/direct/data-addrs.js'
import type { Multiaddr } from '@multiformats/multiaddr'
import { peerIdFromString } from '@libp2p/peer-id'
import { defaultKernelBackend, type KernelBackend } from './kernels/reduce-kernels.js'
import { AVERAGING_PARAMETERS, type AveragingKey, type AveragingParameter } from '../api/averaging-parameters.js'
import { checkValue, formatRange, MAX_TIMER_SECONDS, toAgent, type Bound } from '../api/parameter-bounds.js'
import { silentLog, type Log } from './log.js'

export type AveragerMode = 'node' | 'client' | 'auxiliary'

/** The DecentralizedAverager knobs, with hivemind's meaning; times in seconds. */
export interface AveragerConfig {
  readonly prefix: string
  readonly targetGroupSize: number
  readonly minGroupSize: number
  readonly initialGroupBits: string
  readonly averagingExpiration: number
  readonly requestTimeout: number
  readonly allreduceTimeout: number
  readonly partSizeBytes: number
  readonly averagingAlpha: number
  /** A codec, or auto: none or float16 per round, whichever the group measured faster. */
  readonly compression: CompressionChoice
  readonly mode: AveragerMode
  /** Declared bandwidth sizing our span; undefined = the rate our link carried in recent rounds (measured), the group's mean until then. */
  readonly bandwidth?: number
  /**
   * Gap after which a silent sender is left out (default: allreduceTimeout / 4, at least
   * requestTimeout); sooner once most of the group delivered (agent/allreduce/adaptive-deadline.ts).
   */
  readonly senderTimeout?: number
  /**
   * How tensor parts travel: 'direct' (default) over TLS sockets authenticated by libp2p peer ids,
   * falling back to libp2p streams where a reducer cannot be reached; 'libp2p' always on streams.
   */
  readonly dataChannel?: DataChannelKind
  /** Address the direct data channel listens on (default 0.0.0.0). */
  readonly dataHost?: string
  /** Port of the direct data channel (default 0: any free port, advertised to the group). */
  readonly dataPort?: number
  /** Kernels that check and sum parts: 'wasm-simd' (default where the runtime has it) or 'js' (same results, more CPU). */
  readonly kernels?: KernelBackend
  /**
   * Worker threads that carry the direct data channel's sockets (TLS, certificate checks,
   * framing); 0 (default): the main thread does, which is best where peers already fill the cores.
   */
  readonly dataThreads?: number
}

/** Least time the direct data channel gives a peer to finish its TLS handshake. */
const DIRECT_HANDSHAKE_TIMEOUT_MS = 10_000

/** Defaults of the averaging parameters, from their table (api/averaging-parameters.ts), in seconds. */
/** A delta round's base is kept only while the agent's memory stays within this share of its container's limit. */
const DELTA_BASE_MEMORY_SHARE = 0.9

export const DEFAULT_AVERAGER_CONFIG: Omit<AveragerConfig, 'prefix'> = { ...averagerDefaults(), mode: 'node' }

export interface NamedTensor extends TensorSchema {
  readonly data: Float32Array
}

export interface StepOptions {
  /** Weight of our tensors in the group mean (default 1; auxiliary peers always 0). */
  readonly weight?: number
  /** Any JSON-serialisable value; every member receives every member's value. */
  readonly gather?: unknown
  /** Seconds to find a group and average (default: 2 × averagingExpiration + allreduceTimeout). */
  readonly timeout?: number
  /** Keep looking after a failed search until the timeout (default true). */
  readonly allowRetries?: boolean
  readonly signal?: AbortSignal
  /** Rounds behind our state (a workload's count); the group agrees on one (StepResult.groupRound). */
  readonly round?: number
  /**
   * The registered tensors this round averages, by name (default: all). Such a round groups only
   * with peers averaging the same subset (its own group keys, "<prefix>.s<tag>.0b<bits>", and its
   * own schema hash: schema.ts subsetSchemaHash) and leaves the other tensors as they are. Names
   * covering every tensor make an ordinary round (same keys and schema hash as without).
   */
  readonly names?: readonly string[]
  /**
   * Settles once the tensors hold this step's values (a trainer's copy-in still under way): the
   * search for a group runs meanwhile, and the all-reduce waits for it. Rejected, the step fails with
   * its reason before averaging (the group's other members go on without us).
   */
  readonly ready?: Promise<unknown>
  /**
   * Called as each part of our tensors takes its mean (the round's parts and its span repair's),
   * with the part's values before and after, before the step returns; never for a part kept local.
   * A caller sums what the round moved here instead of in a second pass over the tensors.
   */
  readonly landed?: (before: Float32Array, after: Float32Array) => void
  /**
   * DiLoCo's outer step, taken here (agent/outer/outer-step.ts): `names` are the members' pseudo-
   * gradients Δ, `outer` names θ and m and the step's hyperparameters. A group whose members hold
   * the same θ, m averages Δ alone and each member steps with the mean; any other group's members
   * step with their own Δ and average θ' and m'. Found a group or not, the step is taken once the
   * values are in (a step alone steps with our own Δ).
   */
  readonly outer?: OuterStep
}

export interface StepResult {
  readonly groupId: string
  readonly groupKey: string
  /** Member peer ids in group order. */
  readonly peers: readonly string[]
  /** The members in auxiliary mode: they reduce but keep no state of their own (no checkpoints either). */
  readonly auxiliary: readonly string[]
  /** Rounds behind the group's state as most members count them (ties: the highest); +1 after this round. */
  readonly groupRound: number
  /** Each member's `gather` value, by peer id. */
  readonly gathered: ReadonlyMap<string, unknown>
  readonly matchmakingMs: number
  readonly allreduce: AllReduceResult
  /** The codec the group used this round (compression auto picks one per round). */
  readonly codec: CompressionName
  /**
   * The codec carried each member's change since the base the group shared, not its values
   * (allreduce/delta-base.ts): the same mean, with a lossy codec's error relative to the change.
   */
  readonly delta: boolean
  /** An outer step's round (StepOptions.outer): whether it averaged the pseudo-gradients alone or θ' and m'. */
  readonly outer?: OuterAveraged
  /** The bandwidth we declared to the group this round: the config's, or the measured bytes/s (undefined before the first measurement). */
  readonly declaredBandwidth?: number
}

/** What onStep reports of a round; codec and declaredBandwidth once a group formed. */
export interface StepDetail {
  readonly matchmakingMs?: number
  readonly result?: AllReduceResult
  readonly error?: string
  /** The codec the group chose for the all-reduce. */
  readonly codec?: CompressionName
  /** Whether the round carried changes since the group's shared base (StepResult.delta). */
  readonly delta?: boolean
  /** An outer step's round: what its group averaged (StepResult.outer). */
  readonly outer?: OuterAveraged
  /** The bandwidth we declared to the group, bytes/s (undefined: none yet, the group assumed its mean). */
  readonly declaredBandwidth?: number
}

export interface AveragerHooks {
  /** Where the averager and its parts (matchmaker, all-reduce, data channel) say what happens. */
  readonly log?: Log
  /** Called when matchmaking assembled our group, before the all-reduce starts. */
  readonly onGroup?: (group: GroupInfo) => void
  readonly onStep?: (outcome: 'success' | 'partial' | 'failure', detail: StepDetail) => void
  /**
   * The Moshpit grid's bits for this agent as the swarm's membership stands (GridLayout), asked
   * before each step: when their width differs from the bits held (the first step, a scale across
   * a power of two) the agent lays itself out again; the same width keeps the bits rounds evolved.
   */
  readonly gridBits?: () => string | undefined
  /**
   * Settles once the routing table has (joinSwarm): an agent starts its workload while the table
   * fills, so a restarted agent's trainer registers and its state downloads meanwhile. The first
   * step's matchmaking waits for it, at most SETTLE_MAX_MS and never past the step's deadline or
   * abort: replicas picked from a table still filling are the wrong ones.
   */
  readonly routed?: Promise<unknown>
  /** A group we led assembled `savedSeconds` before its declaration expired (matchmaking/arrivals.ts). */
  readonly onEarlyAssembly?: (savedSeconds: number) => void
  /** The matchmaker's memory of followers' arrival delays (default: a new one; tests pass one already filled). */
  readonly arrivals?: ArrivalClock
  /**
   * Where our data port is reached at another port, by host (AVS_ANNOUNCE_FILE's data entries: a
   * node port), sent to every group with the port; asked before each step, since the file may change.
   */
  readonly dataAddrs?: () => readonly Multiaddr[]
}

/** An outer step under way: armed once the step's checks passed, taken once θ, m were stepped. */
interface OuterStepping { readonly plan: OuterPlan, armed: boolean, taken: boolean }

const encoder = new TextEncoder()
const decoder = new TextDecoder()

/**
 * hivemind's DecentralizedAverager on js-libp2p: averages its tensors with small groups found
 * through the DHT, by butterfly all-reduce, moving to new Moshpit group bits after each round.
 */
export class DecentralizedAverager {
  /** The config as given, but for the mode: a client takes another once its agent is reachable (becomeReachable). */
  private settings: AveragerConfig
  /** The fixed codec; for auto, the largest-part one (frames are sized by it), the round's is chosen per group. */
  private readonly codec: Codec
  /** Peak-window rate of our link in recent rounds, bytes/s (agent/adapt/link-rate.ts). */
  private measuredRate: number | undefined
  private readonly codecClock = new CodecClock()
  /** The first step waited for hooks.routed (or gave up on it): later steps do not. */
  private routedOnce = false
  private readonly matchmaker: Matchmaker
  private readonly router: AggregateRouter
  private dialer: AggregateDialer
  private directServer: DirectListener | null = null
  /** Handlers of the direct channels of other protocols than the all-reduce's (state sharing's), by ALPN id. */
  private readonly directHandlers = new Map<string, (channel: DirectFrameChannel) => void>()
  private transport: DirectTransport = mainThreadTransport
  private readonly tensorLock = new Mutex()
  /** The result of our last round landed whole, which delta rounds send changes against; none in swarms that never compress. */
  private readonly deltaBase: DeltaBase | undefined
  /** Which θ, m state outer steps left in each tensor (agent/outer/outer-step.ts). */
  private readonly outerStates: OuterStates
  private readonly stepLock = new Mutex()
  private bits: string
  private readonly shutdownController = new AbortController()
  private readonly log: Log
  private running = false
  /** The all-reduce under way (a round's, then its repair's): the one a leave notice hands off. */
  private allReduceRunner: AllReduceRunner | undefined
  /** When a leave notice says to hand off (epoch ms; leaveBy), and its timer. */
  private leaveAt: number | undefined
  private leaveTimer: NodeJS.Timeout | undefined
  /** How to unregister each protocol start() registered, in the order registered. */
  private readonly started: Array<() => Promise<void>> = []
  /** The direct data channel's certificate; undefined without one (AVS_DATA_CHANNEL libp2p). */
  private dataIdentity: DataChannelIdentity | undefined

  private constructor (readonly node: SwarmNode, private readonly tensors: readonly NamedTensor[], config: AveragerConfig, private readonly hooks: AveragerHooks) {
    this.settings = config
    this.log = hooks.log ?? silentLog
    this.codec = codecFor(config.compression === 'auto' ? 'none' : config.compression)
    this.bits = config.initialGroupBits
    this.outerStates = new OuterStates(tensors.length)
    if (config.compression !== 'none' && config.mode !== 'auxiliary' && config.averagingAlpha === 1) {
      const limit = containerMemoryBytes()
      this.deltaBase = new DeltaBase(tensors.map(t => t.data.length), bytes => process.memoryUsage().rss + bytes <= DELTA_BASE_MEMORY_SHARE * limit,
        bytes => { this.log.warn(`rounds send values, not changes: a ${(bytes / 2 ** 20).toFixed(0)} MiB copy of the last round's result does not fit in ${(DELTA_BASE_MEMORY_SHARE * 100).toFixed(0)} % of the agent's ${(limit / 2 ** 30).toFixed(1)} GiB`) })
    }
    // The node's rendezvous, shared with state sharing: the node starts and stops it, never the averager.
    this.matchmaker = new Matchmaker(node, node.services.rendezvous, {
      prefix: config.prefix,
      mode: wireMode(config.mode),
      schemaHash: schemaHash(tensors, config.compression, config.partSizeBytes),
      targetGroupSize: config.targetGroupSize,
      minGroupSize: config.minGroupSize,
      averagingExpiration: config.averagingExpiration,
      requestTimeout: config.requestTimeout,
      log: this.log.child({ component: 'matchmaker' }),
      arrivals: hooks.arrivals,
      onEarlyAssembly: hooks.onEarlyAssembly
    })
    const maxPart = elementsPerPart(config.partSizeBytes, this.codec.bytesPerElement)
    // A new stream's first frame can queue behind megabytes of other streams' parts on the
    // same connection: give it the sender timeout, not the (short) matchmaking request timeout.
    this.router = new AggregateRouter(maxPartFrameBytes(this.codec.encodedLength(maxPart)), senderTimeoutSeconds(config) * 1000)
    this.dialer = new AggregateDialer(node, config.prefix, null, null, this.log.child({ component: 'data-channel' }))
  }

  get config (): AveragerConfig { return this.settings }

  /** The bandwidth we declare next round: the config's, else the rate we measured (bytes/s), else undefined. */
  get declaredBandwidth (): number | undefined {
    return this.config.bandwidth ?? this.measuredRate
  }

  /** The kernels this averager's rounds check and sum parts with. */
  get kernelBackend (): KernelBackend {
    return this.config.kernels ?? defaultKernelBackend()
  }

  /** The path our parts take to reducers, and the port we advertise for theirs. */
  get dataChannel (): { readonly kind: DataChannelKind, readonly port: number, readonly threads: number, readonly opened: Readonly<Record<DataChannelKind, number>>, readonly reused: number } {
    const kind = this.directServer != null || this.dialer.hasIdentity ? 'direct' : 'libp2p'
    return { kind, port: this.directServer?.port ?? 0, threads: kind === 'direct' ? this.transport.threads : 0, opened: this.dialer.opened, reused: this.dialer.reused }
  }

  /** Validates the config, registers the protocols and returns a running averager. */
  static async create (node: SwarmNode, tensors: readonly NamedTensor[], config: AveragerConfig, hooks: AveragerHooks = {}): Promise<DecentralizedAverager> {
    validateConfig(config)
    for (const t of tensors) {
      if (elementCount(t.shape) !== t.data.length) throw new AveragingError(`tensor ${t.name} has shape [${t.shape.join(', ')}] but ${t.data.length} values`)
    }
    const averager = new DecentralizedAverager(node, tensors, config, hooks)
    try {
      await averager.start()
    } catch (err) {
      // Undo what did start (a taken data port fails the listen after the join protocol is
      // registered): a retried create, as the sidecar's register does, registers it again.
      await averager.release()
      throw err
    }
    return averager
  }

  private async start (): Promise<void> {
    await this.matchmaker.start()
    this.started.push(async () => { await this.matchmaker.stop() })
    if ((this.config.dataChannel ?? 'direct') === 'direct') await this.startDirectChannel()
    // Client-mode peers reduce nothing, so nobody dials them: they only dial out.
    if (this.config.mode !== 'client') await this.serveSpan()
    this.running = true
  }

  /**
   * A client whose agent became reachable after it started (a relay slot reserved later:
   * agent/main.ts) takes `mode` from its next round: it serves its span (the data channel's
   * listener, the all-reduce protocol) and the matchmaker's leader side, and its join requests say
   * `mode`, so leaders make it a reducer. A round under way ends first, as a client's: members
   * plan a round by the modes its join requests carried. Returns whether the mode changed.
   */
  async becomeReachable (mode: Exclude<AveragerMode, 'client'>): Promise<boolean> {
    return await this.stepLock.run(async () => {
      if (!this.running || this.config.mode !== 'client') return false
      await this.serveSpan()
      await this.matchmaker.serveAs(wireMode(mode))
      this.settings = { ...this.settings, mode }
      return true
    })
  }

  /** What members that give us a span send its parts to: the direct data channel's listener (when direct), the all-reduce protocol over libp2p. */
  private async serveSpan (): Promise<void> {
    if (this.dataIdentity !== undefined) await this.listenDirect(this.dataIdentity)
    await this.node.handle(aggregateProtocol(this.config.prefix), this.router.handler, { maxInboundStreams: 16, runOnLimitedConnection: false })
    this.started.push(async () => { await this.node.unhandle(aggregateProtocol(this.config.prefix)).catch(() => {}) })
  }

  /** Stops what start() started and closes the data channel; never the node's own services (the rendezvous). */
  private async release (): Promise<void> {
    for (const stop of this.started.splice(0)) await stop()
    this.node.removeEventListener('stop', this.onNodeStop)
    this.dialer.closeAll(new AveragingError('the averager shut down'))
    await this.directServer?.close()
    await this.transport.close()
  }

  private async startDirectChannel (): Promise<void> {
    const identity = await this.node.services.dataIdentity.create()
    const threads = this.config.dataThreads ?? 0
    if (threads > 0) {
      const pool = DataThreads.start(threads, this.log.child({ component: 'data-threads' }))
      this.transport = pool
      await pool.ready()
    }
    // The data channel lives and dies with the node, as if they were one transport.
    this.node.addEventListener('stop', this.onNodeStop, { once: true })
    this.dataIdentity = identity
    this.dialer = this.directDialer(identity)
  }

  private directDialer (identity: DataChannelIdentity): AggregateDialer {
    return new AggregateDialer(this.node, this.config.prefix, identity, this.transport, this.log.child({ component: 'data-channel' }))
  }

  /** The direct data channel's listener, for the all-reduce's parts and state sharing's downloads. */
  private async listenDirect (identity: DataChannelIdentity): Promise<void> {
    const maxPart = elementsPerPart(this.config.partSizeBytes, this.codec.bytesPerElement)
    const options: DirectListenOptions = {
      identity,
      host: this.config.dataHost ?? '0.0.0.0',
      port: this.config.dataPort ?? 0,
      // State sharing's too: one port for every direct channel, so a pod exposes one data port.
      protocols: [...directAggregateProtocols(this.config.prefix), ...directStateProtocols(this.config.prefix)],
      maxFrameBytes: maxPartFrameBytes(this.codec.encodedLength(maxPart)),
      maxQueuedFrames: PART_WINDOW,
      // Generous: a handshake slowed by load costs the sender a fallback to libp2p, a slowloris
      // costs one of the 64 connections allowed per address for this long.
      handshakeTimeoutMs: Math.max(this.config.requestTimeout * 1000, DIRECT_HANDSHAKE_TIMEOUT_MS),
      // Only peers holding a libp2p connection to us may open a data channel: they passed the
      // private-network key and the allow list there. Group membership is checked after that.
      allowPeer: async (peer) => await hasConnection(this.node, peer, this.config.requestTimeout * 1000),
      accept: (channel) => {
        const other = this.directHandlers.get(channel.protocol)
        if (this.node.status !== 'started') channel.abort(new AveragingError('the libp2p node is stopping'))
        else if (other !== undefined) other(channel)
        else if (directAggregateProtocols(this.config.prefix).includes(channel.protocol)) this.router.accept(channel, channel.remotePeer)
        else channel.abort(new AveragingError(`nothing is served over ${channel.protocol} here now`))
      },
      log: this.log.child({ component: 'data-channel' })
    }
    try {
      this.directServer = await this.transport.listen(options)
    } catch (err) {
      if (this.transport.threads === 0) throw err
      // Data threads need SO_REUSEPORT (Linux, FreeBSD, ...): elsewhere the main thread carries the channel.
      this.log.warn(`data threads cannot listen (${describeError(err)}); the direct channel runs on the main thread`)
      await this.transport.close()
      this.transport = mainThreadTransport
      // Ours went with the threads.
      this.dialer = this.directDialer(identity)
      this.directServer = await this.transport.listen(options)
    }
  }

  private readonly onNodeStop = (): void => {
    this.dialer.closeAll(new AveragingError('the libp2p node stopped'))
    void this.directServer?.close().then(async () => { await this.transport.close() })
  }

  /**
   * The direct data channel server for other protocols than the all-reduce's (state sharing serves
   * newcomers on it); undefined without one (AVS_DATA_CHANNEL libp2p, or a client-mode peer).
   */
  directEndpoint (): DirectEndpoint | undefined {
    const server = this.directServer
    if (server == null) return undefined
    const offered = directStateProtocols(this.config.prefix)
    return {
      port: server.port,
      serve: (protocol, accept) => {
        if (!offered.includes(protocol)) throw new AveragingError(`the data channel server does not offer ${protocol}`)
        this.directHandlers.set(protocol, accept)
        return () => { if (this.directHandlers.get(protocol) === accept) this.directHandlers.delete(protocol) }
      }
    }
  }

  get groupBits (): string { return this.bits }

  setGroupBits (bits: string): void {
    if (!isGroupBits(bits)) throw new AveragingError(`group bits must be a string of 0 and 1, got "${bits}"`)
    this.bits = bits
  }

  get currentGroupKey (): string { return groupKey(this.config.prefix, this.bits) }

  /** Runs fn with exclusive access to the tensors: no all-reduce writes them meanwhile. */
  async withTensors<T> (fn: (tensors: readonly NamedTensor[]) => T | Promise<T>): Promise<T> {
    return await this.tensorLock.run(async () => await fn(this.tensors))
  }

  /** Finds a group and averages with it once; throws AveragingError with a clear reason on failure. */
  async step (options: StepOptions = {}): Promise<StepResult> {
    if (!this.running) throw new AveragingError('the averager is shut down')
    const outer = options.outer === undefined ? undefined : this.planOuter(options)
    return await this.stepLock.run(async () => {
      const stepping: OuterStepping | undefined = outer === undefined ? undefined : { plan: outer, armed: false, taken: false }
      try {
        return await this.runStep(options, stepping)
      } catch (err) {
        // No group, or a round that failed before the step was taken: we step with our own Δ.
        if (stepping !== undefined) await this.stepAlone(stepping, options.ready)
        throw err
      }
    })
  }

  /**
   * The trainer replaced the tensors outside a round (its own state, a restored checkpoint): θ and m
   * no longer hold the state outer steps shared with a group.
   */
  tensorsReplaced (): void {
    this.outerStates.forget(this.tensors.map((_t, i) => i))
  }

  /** Which shared θ, m state outer steps left in each tensor, as a state download carries it (call under withTensors). */
  outerStatesSnapshot (): OuterStateSnapshot {
    return this.outerStates.snapshot()
  }

  /** The tensors now hold a donor's, and with them its shared states (a snapshot from its download's metadata). */
  adoptOuterStates (snapshot: unknown): boolean {
    return this.outerStates.adopt(snapshot)
  }

  private planOuter (options: StepOptions): OuterPlan {
    if (this.config.mode === 'auxiliary') throw new AveragingError('an auxiliary agent holds no state of its own: it takes no outer steps')
    return planOuterStep(this.tensors, options.names, options.outer!)
  }

  private async runStep (options: StepOptions, stepping?: OuterStepping): Promise<StepResult> {
    const { config } = this
    const weight = config.mode === 'auxiliary' ? 0 : options.weight ?? 1
    if (!(weight >= 0) || !Number.isFinite(weight)) throw new AveragingError(`weight must be a finite number >= 0, got ${weight}`)
    if (options.round !== undefined && !validRound(options.round)) throw new AveragingError(`round must be an integer from 0 to ${MAX_ROUND}, got ${options.round}`)
    const userData = options.gather === undefined ? new Uint8Array(0) : encoder.encode(JSON.stringify(options.gather))
    if (userData.byteLength > MAX_GATHER_BYTES) throw new AveragingError(`gathered data must serialise to at most ${MAX_GATHER_BYTES / 1024} KiB of JSON`)
    const times = config.compression === 'auto' ? this.codecClock.times : {}
    const info: PeerInfo = {
      mode: wireMode(config.mode), bandwidth: this.declaredBandwidth, bandwidthMeasured: config.bandwidth === undefined && this.measuredRate !== undefined, weight,
      secondsNone: times.none, secondsFloat16: times.float16, userData: userData as Uint8Array<ArrayBuffer>,
      dataPort: this.directServer?.port ?? 0,
      dataAddrs: this.directServer == null ? [] : dataAddrsToWire(this.hooks.dataAddrs?.() ?? []),
      addrs: ownAddrBytes(this.node).slice(0, 16) as Array<Uint8Array<ArrayBuffer>>,
      round: options.round ?? 0
    }
    const outer = stepping?.plan
    const subset = outer !== undefined ? [...outer.gradients].sort((a, b) => a - b) : options.names === undefined ? undefined : subsetOf(this.tensors, options.names)
    if (outer !== undefined) {
      // Members leave a round with one θ, m only when each lands the mean itself (averagingAlpha 1).
      info.outerState = config.averagingAlpha === 1 ? this.outerStates.declared(outer) : new Uint8Array(0)
      // A group that averages θ' and m' sends their changes since a base it shares, as any round does.
      if (this.deltaBase !== undefined) info.base = this.deltaBase.idFor(stateIndices(outer))
      stepping!.armed = true
    } else {
      // The values this step brings replace whatever state outer steps left in these tensors.
      this.outerStates.forget(subset ?? this.tensors.map((_t, i) => i))
      if (this.deltaBase !== undefined) info.base = this.deltaBase.idFor(subset ?? this.tensors.map((_t, i) => i))
    }
    const tensorsHash = subset === undefined ? undefined : subsetSchemaHash(this.tensors, subset, config.compression, config.partSizeBytes)
    const subsetHash = outer !== undefined && tensorsHash !== undefined ? outerSchemaHash(tensorsHash, outer) : tensorsHash
    const prefix = subsetHash === undefined ? config.prefix : `${config.prefix}.s${subsetTag(subsetHash)}`
    const timeout = options.timeout ?? 2 * config.averagingExpiration + config.allreduceTimeout
    const deadline = Date.now() / 1000 + timeout
    const signal = options.signal != null ? AbortSignal.any([options.signal, this.shutdownController.signal]) : this.shutdownController.signal
    if (this.hooks.routed !== undefined && !this.routedOnce) {
      const settled = await untilOrDeadline(this.hooks.routed, Math.min(SETTLE_MAX_MS, deadline * 1000 - Date.now()), signal)
      this.routedOnce = true
      if (!settled) this.log.info('the first round starts before the routing table settled')
    }
    const started = Date.now()
    const grid = this.hooks.gridBits?.()
    if (grid !== undefined && grid.length !== this.bits.length) {
      this.log.info(`on the Moshpit grid from now on: bits "${grid}" (were "${this.bits}")`)
      this.bits = grid
    }
    for (;;) {
      const key = groupKey(prefix, this.bits)
      let group
      try {
        // Peers left alone under their Moshpit key meet under the swarm's bit-less key.
        const leftovers = this.bits.length > 0 ? groupKey(prefix, '') : undefined
        group = await this.matchmaker.lookForGroup(key, info, deadline, signal, leftovers, subsetHash)
      } catch (err) {
        const retry = options.allowRetries !== false && err instanceof MatchmakingError && Date.now() / 1000 < deadline - 0.05 && !signal.aborted
        if (retry) continue
        this.hooks.onStep?.('failure', { error: describeError(err) })
        throw err instanceof AveragingError ? err : new AveragingError(describeError(err))
      }
      const matchmakingMs = Date.now() - started
      this.hooks.onGroup?.(group)
      this.log.debug(`joined group ${groupIdHex(group.groupId).slice(0, 8)} of ${group.peerIds.length} (leader ${group.leader.slice(-6)}) after ${matchmakingMs} ms`)
      const codec = this.roundCodec(group)
      // An outer step's group averages Δ alone when every member holds the same θ, m and steps alike.
      const averaged: OuterAveraged | undefined = outer === undefined ? undefined : sharedBase(group.infos, 'outerState') ? 'pseudo-gradients' : 'parameters'
      // Every member computes it alike; an auxiliary member (no base of its own) reduces the changes as it would values.
      const delta = averaged !== 'pseudo-gradients' && isDeltaRound(group.infos, codec.name)
      const declaredBandwidth = info.bandwidth
      const roundDetail = { matchmakingMs, codec: codec.name, delta, ...(averaged !== undefined ? { outer: averaged } : {}), ...(declaredBandwidth !== undefined ? { declaredBandwidth } : {}) }
      try {
        // The matchmaking overlapped the caller's copy-in (StepOptions.ready): the values must be in.
        if (options.ready !== undefined) await options.ready
        const result = await this.tensorLock.run(async () => stepping !== undefined && averaged !== undefined
          ? await this.outerRound(group, codec, stepping, averaged, delta, options.landed)
          : await this.averageTensors(group, codec, delta, subset, options.landed))
        // Timed as a round over every tensor would take: subset rounds (fragments) and an outer step's
        // rounds (Δ alone, or θ' and m') average different shares of them, and auto compares codecs across rounds.
        if (config.compression === 'auto') this.codecClock.record(codec.name as AutoCodec, result.durationMs / 1000 / this.shareOf(averaged === 'pseudo-gradients' ? outer!.gradients : averaged === 'parameters' ? stateIndices(outer!) : subset))
        this.bits = nextGroupBits(bitsFromKey(group.gridKey, prefix, this.bits), group.groupId, group.myIndex, group.peerIds.length, config.targetGroupSize)
            const outcome = result.partsKeptLocal > 0 || result.bannedSenders.length > 0 ? 'partial' : 'success'
        this.hooks.onStep?.(outcome, { ...roundDetail, result })
        return {
          groupId: groupIdHex(group.groupId),
          groupKey: key,
          peers: group.peerIds,
          auxiliary: group.peerIds.filter((_, i) => group.infos[i].mode === PeerMode.AUXILIARY),
          groupRound: agreedRound(group.infos.filter(i => i.mode !== PeerMode.AUXILIARY).map(i => i.round)),
          gathered: new Map(group.peerIds.map((peer, i) => [peer, parseGather(group.infos[i].userData)])),
          matchmakingMs,
          allreduce: result,
          codec: codec.name,
          delta,
          ...(averaged !== undefined ? { outer: averaged } : {}),
          ...(declaredBandwidth !== undefined ? { declaredBandwidth } : {})
        }
      } catch (err) {
        this.hooks.onStep?.('failure', { ...roundDetail, error: describeError(err) })
        throw err instanceof AveragingError ? err : new AveragingError(`all-reduce failed: ${describeError(err)}`)
      }
    }
  }

  /** The share of our values that the tensors `indices` hold (all of them: 1). */
  private shareOf (indices: readonly number[] | undefined): number {
    if (indices === undefined) return 1
    const total = this.tensors.reduce((n, t) => n + t.data.length, 0)
    const part = indices.reduce((n, i) => n + this.tensors[i].data.length, 0)
    return total > 0 && part > 0 ? part / total : 1
  }

  /** The fixed codec, or for auto the one every member computes from the same gathered infos. */
  private roundCodec (group: GroupInfo): Codec {
    if (this.config.compression !== 'auto') return this.codec
    return codecFor(chooseCodec(group.infos.map(i => ({ none: i.secondsNone, float16: i.secondsFloat16 }))))
  }

  /**
   * One all-reduce with the group over our tensors, or over the subset's (their indices) only; in a
   * delta round over their changes since the shared base. A round that lands whole leaves its result
   * in the base buffers as our base (allreduce/delta-base.ts); any other leaves the step's tensors without one.
   */
  private async averageTensors (group: GroupInfo, codec: Codec, delta: boolean, subset: readonly number[] | undefined, landed: StepOptions['landed']): Promise<AllReduceResult> {
    const indices = subset ?? this.tensors.map((_t, i) => i)
    const tensors = indices.map(i => this.tensors[i].data)
    const bases = this.deltaBase
    const buffers = bases?.buffersFor(indices)
    if (bases === undefined || buffers === undefined) {
      if (delta && this.config.mode !== 'auxiliary') throw new AveragingError('a delta round without base buffers (a bug: we declared a base)')
      bases?.forget(indices)
      return await this.allReduce(group, codec, tensors, landed)
    }
    let result: AllReduceResult | undefined
    try {
      result = await this.allReduce(group, codec, tensors, landed, { tensors: buffers, delta })
    } finally {
      if (result !== undefined && result.partsKeptLocal === 0) bases.landed(indices, group.groupId)
      else bases.forget(indices)
    }
    return result
  }

  /**
   * An outer step's round (agent/outer/outer-step.ts). With the same θ, m on every member: Δ is
   * averaged, then each member steps with the mean (bit-identical θ, m when the round landed whole).
   * Otherwise: each member steps with its own Δ, then θ' and m' are averaged. The step is taken
   * whether or not the all-reduce ends well (parts kept local hold our own values).
   */
  private async outerRound (group: GroupInfo, codec: Codec, stepping: OuterStepping, averaged: OuterAveraged, delta: boolean, landed: StepOptions['landed']): Promise<AllReduceResult> {
    const { plan } = stepping
    if (averaged === 'parameters') this.takeOuterStep(stepping)
    let result: AllReduceResult | undefined
    try {
      // Δ is new every round: no base of its own (θ and m keep theirs, for the rounds that average them).
      result = averaged === 'parameters'
        ? await this.averageTensors(group, codec, delta, stateIndices(plan), landed)
        : await this.allReduce(group, codec, [...plan.gradients].sort((a, b) => a - b).map(i => this.tensors[i].data), landed)
    } finally {
      this.takeOuterStep(stepping)
      if (result !== undefined && result.partsKeptLocal === 0 && this.config.averagingAlpha === 1) this.outerStates.landed(plan, group.groupId)
      else this.outerStates.forget(stateIndices(plan))
    }
    return result
  }

  /** Steps θ, m with Δ as the tensors hold it, once per outer step. */
  private takeOuterStep (stepping: OuterStepping): void {
    if (stepping.taken) return
    stepping.taken = true
    const { plan } = stepping
    const t = this.tensors
    plan.gradients.forEach((g, k) => { applyOuterStep(t[plan.params[k]].data, t[plan.buffers[k]].data, t[g].data, plan.lr, plan.momentum, plan.nesterov) })
  }

  /** An outer step that found no group (or failed before stepping): our own Δ, once the values are in. */
  private async stepAlone (stepping: OuterStepping, ready?: Promise<unknown>): Promise<void> {
    if (!stepping.armed || stepping.taken) return
    // A copy-in refused (a NaN) left Δ as it was: no step with someone else's values.
    if (ready !== undefined && !(await ready.then(() => true, () => false))) return
    await this.tensorLock.run(async () => {
      this.takeOuterStep(stepping)
      this.outerStates.forget(stateIndices(stepping.plan))
    })
  }

  /** One all-reduce with the group over `tensors` (and its span repair); `base`: AllReduceOptions.base. */
  private async allReduce (group: GroupInfo, codec: Codec, tensors: Float32Array[], landed?: StepOptions['landed'], base?: AllReduceOptions['base']): Promise<AllReduceResult> {
    const runner = this.newRunner(group, tensors, codec, landed, undefined, base)
    // Our link's rate: the kernel's byte counters, else the parts' bytes (agent/adapt/link-rate.ts).
    // Sampled from the runner's start, as its durationMs counts: a round long enough to measure by its
    // duration is one its samples span. Started after the address merges below, they spanned less than
    // the 300 ms window of a 339 ms round under load (its first part came 191 ms into it).
    const rx: ByteSample[] = []; const tx: ByteSample[] = []
    const sample = (): void => {
      const t = performance.now()
      const net = netBytes()
      rx.push({ t, bytes: net?.rx ?? runner.receivedBytes })
      tx.push({ t, bytes: net?.tx ?? 0 })
    }
    sample()
    const sampler = setInterval(sample, SAMPLE_MS)
    let result: AllReduceResult
    try {
      // Members usually know only the leader: learn everyone's addresses so no span waits on a DHT lookup.
      await Promise.all(group.peerIds.map(async (peer, i) => {
        if (i !== group.myIndex) await rememberAddrs(this.node, peerIdFromString(peer), group.infos[i].addrs).catch(() => {})
      }))
      this.router.register(group.groupId, runner)
      this.runUnderLeaveNotice(runner)
      result = await runner.run()
      sample()
      // A round that lost members measured their failure, not our link; one shorter than a
      // measuring window measured when its samples fell (link-rate.ts, shortRound).
      if (result.failedReducers.length === 0 && result.bannedSenders.length === 0 && !shortRound(result.durationMs)) {
        const peaks = [peakWindowRate(rx), peakWindowRate(tx)].filter((r): r is number => r !== undefined)
        this.measuredRate = smoothRate(this.measuredRate, peaks.length > 0 ? Math.max(...peaks) : undefined)
      }
    } finally {
      clearInterval(sampler)
      this.router.unregister(group.groupId)
      this.allReduceRunner = undefined
    }
    // The repair shares the round's allreduceTimeout (every bound on a step stays as it was); with
    // less than two request timeouts of it left, the failed spans stay local as before.
    const left = this.config.allreduceTimeout * 1000 - result.durationMs
    // A member that handed off is leaving: the repair is the others'.
    const repair = left >= 2 * this.config.requestTimeout * 1000 && !runner.left ? planRepair(group, runner.plan, tensors, result, base?.tensors) : null
    const repairBase = repair?.base !== undefined && base !== undefined ? { tensors: repair.base, delta: base.delta } : undefined
    return repair == null ? result : withRepair(result, await this.repairSpans(repair, codec, left, landed, repairBase), repair.parts)
  }

  /** The survivors' all-reduce over the spans of reducers that died before answering (agent/allreduce/repair.ts). */
  private async repairSpans (repair: SpanRepair, codec: Codec, timeoutMs: number, landed?: StepOptions['landed'], base?: AllReduceOptions['base']): Promise<AllReduceResult> {
    const runner = this.newRunner(repair.group, repair.tensors, codec, landed, { repairOf: repair.repairOf, timeoutMs }, base)
    this.router.register(repair.group.groupId, runner)
    this.runUnderLeaveNotice(runner)
    try {
      const result = await runner.run()
      const kept = result.partsKeptLocal
      const what = `${repair.parts} parts of failed reducers' spans among the ${repair.group.peerIds.length} members left`
      if (kept === 0) this.log.info(`averaged ${what}`)
      else this.log.warn(`averaged ${what}, keeping ${kept} of them local: ${[...result.failedReducers, ...result.bannedSenders].join(', ')} failed in the repair too`)
      return result
    } finally {
      this.router.unregister(repair.group.groupId)
      this.allReduceRunner = undefined
    }
  }

  /** Parts of our span reduced so far in the all-reduce under way, and how many it has; undefined between all-reduces. */
  get spanProgress (): { reduced: number, span: number } | undefined {
    return this.allReduceRunner?.spanProgress
  }

  /**
   * A leave notice (SIGTERM, and the kill that follows it after the pod's grace period): a round
   * still under way at `atMs` (epoch ms) stops there, hands the rest of our span to the group, which
   * averages it among the members left (AllReduceRunner.handOff, repair.ts), and ends; one that ends
   * sooner finishes as any round does. Without it a round longer than the grace period ends in the
   * kill, and the group keeps the rest of our span local (a reducer that answered in part).
   */
  leaveBy (atMs: number): void {
    if (this.leaveAt !== undefined && this.leaveAt <= atMs) return
    this.leaveAt = atMs
    clearTimeout(this.leaveTimer)
    // Due already (a grace period shorter than the margin): now, not after the timers of a busy loop.
    if (atMs <= Date.now()) {
      this.handOffIfRunning()
      return
    }
    this.leaveTimer = setTimeout(() => { this.handOffIfRunning() }, Math.max(0, atMs - Date.now()))
    this.leaveTimer.unref()
  }

  private runUnderLeaveNotice (runner: AllReduceRunner): void {
    this.allReduceRunner = runner
    if (this.leaveAt !== undefined && Date.now() >= this.leaveAt) this.handOffIfRunning()
  }

  private handOffIfRunning (): void {
    const handed = this.allReduceRunner?.handOff('the leave notice ran out before our round ended')
    if (handed == null) return
    this.log.warn(`leaving before our round ended: handed ${handed.span - handed.reduced} of the ${handed.span} parts of our span to the group (${handed.reduced} reduced)`)
  }

  /** `repair`: a span repair's runner, with the round it repairs and what is left of the round's allreduceTimeout. */
  private newRunner (group: GroupInfo, tensors: readonly Float32Array[], codec: Codec, landed?: StepOptions['landed'], repair?: { repairOf: Uint8Array, timeoutMs: number }, base?: AllReduceOptions['base']): AllReduceRunner {
    const { config } = this
    const allreduceMs = config.allreduceTimeout * 1000
    const senderTimeoutMs = senderTimeoutSeconds(config) * 1000
    return new AllReduceRunner({
      dialer: this.dialer,
      group,
      tensors,
      codec,
      partSizeBytes: config.partSizeBytes,
      alpha: config.averagingAlpha,
      timeoutMs: repair?.timeoutMs ?? allreduceMs,
      senderTimeoutMs,
      // A late sender always gets at least two request timeouts over the others' median wait: the
      // operator's own bound on how late a message may be on this network, twice, because a part
      // is larger than a request and queues behind other members' parts (no new parameter).
      deadlineSlackMs: 2 * config.requestTimeout * 1000,
      reducerTimeoutMs: Math.min(allreduceMs, 2 * senderTimeoutMs),
      // A late member that answers matchmaking's liveness check is waited for, up to the fixed
      // timeouts: on a congested link one TCP flow can stall for seconds. No verdict (a client-mode
      // member serves no check) proves nothing: it is cut off as before.
      alive: async (peer, withinMs, signal) => {
        const verdict = await this.matchmaker.liveness.check(peerIdFromString(peer), withinMs, signal)
        return verdict === 'no verdict' ? 'unknown' : verdict === 'answered'
      },
      aliveCheckMs: config.requestTimeout * 1000,
      kernels: config.kernels,
      ...(repair !== undefined ? { repairOf: repair.repairOf } : {}),
      ...(landed !== undefined ? { landed } : {}),
      ...(base !== undefined ? { base } : {}),
      log: this.log.child({ component: 'allreduce' })
    })
  }

  /** Leaves any search, unregisters the protocols; the libp2p node (and its rendezvous) is the caller's to stop. */
  async shutdown (): Promise<void> {
    if (!this.running) return
    this.running = false
    this.shutdownController.abort()
    await this.stepLock.run(async () => {})
    clearTimeout(this.leaveTimer)
    await this.release()
  }
}

/** Whether a peer has (or, within the wait, gets) a libp2p connection to us: the responder finishes its upgrade a moment after the dialer. */
async function hasConnection (node: SwarmNode, peer: string, waitMs: number): Promise<boolean> {
  const id = peerIdFromString(peer)
  const deadline = Date.now() + waitMs
  while (node.getConnections(id).length === 0) {
    if (Date.now() >= deadline || node.status !== 'started') return false
    await new Promise(resolve => setTimeout(resolve, 20))
  }
  return true
}

function senderTimeoutSeconds (config: AveragerConfig): number {
  return config.senderTimeout ?? Math.max(config.requestTimeout, config.allreduceTimeout / 4)
}

/**
 * The round most members report (ties: the highest). A member that joined from a stale donor
 * catches up with the others, and one peer cannot move a group of three or more to a round of its
 * choosing (a forged round would end a run early or label its checkpoints wrongly).
 */
export function agreedRound (rounds: readonly number[]): number {
  const counts = new Map<number, number>()
  for (const r of rounds) counts.set(r, (counts.get(r) ?? 0) + 1)
  let best = 0
  let bestCount = 0
  for (const [r, n] of counts) if (n > bestCount || (n === bestCount && r > best)) { best = r; bestCount = n }
  return best
}

function wireMode (mode: AveragerMode): PeerMode {
  return mode === 'client' ? PeerMode.CLIENT : mode === 'auxiliary' ? PeerMode.AUXILIARY : PeerMode.NODE
}

function parseGather (bytes: Uint8Array): unknown {
  if (bytes.byteLength === 0) return undefined
  try { return JSON.parse(decoder.decode(bytes)) } catch { return undefined }
}

/** One clear sentence per bad value, before anything starts. */
export function validateConfig (c: AveragerConfig): void {
  const fail = (msg: string): never => { throw new AveragingError(msg) }
  // Integers, text and fractions: the parameter table's bounds, which the CRD enforces too.
  const checked: AveragingKey[] = ['prefix', 'targetGroupSize', 'minGroupSize', 'initialGroupBits', 'partSizeBytes', 'averagingAlpha', 'compression', 'dataThreads', 'bandwidth']
  for (const k of checked) {
    const v = c[k as keyof AveragerConfig]
    if (v === undefined && (k === 'bandwidth' || k === 'dataThreads')) continue
    const bound: Bound = AVERAGING_PARAMETERS[k].bound
    if (checkValue(bound, v) !== undefined) fail(`${k} must be ${formatRange(bound)}, got ${JSON.stringify(v)}`)
  }
  if (c.minGroupSize > c.targetGroupSize) fail(`minGroupSize must be an integer from 2 to targetGroupSize (${c.targetGroupSize}), got ${c.minGroupSize}`)
  // Times in seconds: library callers may go below the CRD's floors (tests do), never to zero or past a Node timer.
  const time = (k: 'averagingExpiration' | 'requestTimeout' | 'allreduceTimeout'): void => {
    if (!(c[k] > 0 && c[k] <= MAX_TIMER_SECONDS)) fail(`${k} must be positive and at most ${MAX_TIMER_SECONDS} s (the longest Node timer), got ${c[k]}`)
  }
  time('averagingExpiration'); time('allreduceTimeout'); time('requestTimeout')
  if (!(c.requestTimeout < c.averagingExpiration)) fail(`requestTimeout must be below averagingExpiration (${c.averagingExpiration} s), got ${c.requestTimeout}`)
  if (!['node', 'client', 'auxiliary'].includes(c.mode)) fail(`mode must be node, client or auxiliary, got "${c.mode}"`)
  if (c.dataChannel !== undefined && !['direct', 'libp2p'].includes(c.dataChannel)) fail(`dataChannel must be direct or libp2p, got "${c.dataChannel}"`)
  if (c.kernels !== undefined && !['wasm-simd', 'js'].includes(c.kernels)) fail(`kernels must be wasm-simd or js, got "${c.kernels}"`)
  if (c.dataPort !== undefined && !(Number.isInteger(c.dataPort) && c.dataPort >= 0 && c.dataPort <= 65535)) fail(`dataPort must be an integer from 0 to 65535, got ${c.dataPort}`)
}

/** The table's defaults in the averager's form (seconds), period left out (the agent's loop owns it). */
function averagerDefaults (): Omit<AveragerConfig, 'prefix' | 'mode'> {
  const out: Record<string, string | number> = {}
  for (const [k, p] of Object.entries(AVERAGING_PARAMETERS) as Array<[AveragingKey, AveragingParameter]>) {
    if (p.default !== undefined && k !== 'period') out[k] = toAgent(p.bound, p.default)
  }
  return out as unknown as Omit<AveragerConfig, 'prefix' | 'mode'>
}
