#!/usr/bin/env node
// The averaging agent: one process per pod (or per local-runtime agent), configured only by
// the environment contract in api/agent-env.ts.
import type { Server } from 'node:http'
import { pino, type Logger } from 'pino'
import { privateKeyFromProtobuf } from '@libp2p/crypto/keys'
import { prometheusMetrics } from '@libp2p/prometheus-metrics'
import type { Multiaddr } from '@multiformats/multiaddr'
import { loadAgentConfig, type AgentConfig } from './config.js'
import { createSwarmNode, type SwarmNode } from './net/node.js'
import { AnnounceFile } from './net/announce-file.js'
import { P2P_CODE } from './net/rpc.js'
import { awaitFirstPeer, connectBootstrap, rejoinWhileIsolated, routingTableSize, settleRoutingTable, SETTLE_MAX_MS } from './net/bootstrap.js'
import { DecentralizedAverager } from './averager.js'
import { handOffOnNotice, LeaveNotice } from './leave-notice.js'
import { AgentMetrics } from './metrics/agent-metrics.js'
import { startMetricsServer } from './metrics/http-server.js'
import { loadTensorBackend } from './tensors/backend.js'
import { builtinWorkload } from './workloads/builtin/workload.js'
import { sidecarWorkload } from './workloads/sidecar/workload.js'
import { StateSharing } from './state/state-sharing.js'
import type { Workload, WorkloadContext } from './workloads/context.js'
import { describeError } from './errors.js'
import { Checkpointer } from './checkpoint/checkpointer.js'
import { establishReachability, circuitAddrs, modeFor, reserveRelaySlot, type Reachability } from './net/reach.js'
import { ConnectionKinds, CONNECTION_KINDS } from './net/connection-kinds.js'
import type { AveragerConfig, AveragerMode } from './averager.js'
import { GridLayout, readMembership } from './moshpit/grid-layout.js'

const VERSION = '0.1.0'
/** How often a relayed agent checks that it still holds a relay slot, and reserves one again when not. */
const RELAY_SLOT_CHECK_MS = 3000
/** How often AVS_ANNOUNCE_FILE is reread; a kubelet takes up to a minute to update a mounted ConfigMap anyway. */
const ANNOUNCE_REREAD_MS = 5000

/** A fatal error as one line: every problem of a multi-line message joined with "; ". */
function fatalLine (what: string, err: unknown): string {
  return `${what}: ${describeError(err).split('\n').map(l => l.trim()).filter(l => l !== '').join('; ')}`
}

type Log = Logger

/** The libp2p node on the pod's address, its metrics in the agent's registry. */
async function startNode (config: AgentConfig, metrics: AgentMetrics, log: Log, announce?: AnnounceFile): Promise<SwarmNode> {
  try {
    return await createSwarmNode({
      announceExtra: announce === undefined ? undefined : () => announce.addrs,
      privateKey: config.identityKey != null ? privateKeyFromProtobuf(config.identityKey) : undefined,
      listen: [`/ip4/${config.podIP}/tcp/${config.p2pPort}`],
      announce: config.announceAddrs.length > 0 ? config.announceAddrs : undefined,
      psk: config.psk,
      allowPeers: config.allowPeers,
      dhtServerLater: true,
      relay: config.relay != null ? { ...config.relay, onRelayed: (bytes) => { metrics.relayedBytes.inc(bytes) } } : undefined,
      metrics: prometheusMetrics({ registry: metrics.registry, preserveExistingMetrics: true, collectDefaultMetrics: false }),
      rendezvous: { requestTimeoutMs: config.averager.requestTimeout * 1000, log }
    })
  } catch (err) {
    // libp2p's own message for a listen failure is a paragraph with the listener's stack trace in it.
    const text = describeError(err)
    if (text.includes('EADDRINUSE')) throw new Error(`the p2p port ${config.podIP}:${config.p2pPort} is already in use`)
    const cause = /failed to be listened on[\s\S]*?Error: ([^\n]+)/.exec(text)?.[1]
    if (cause !== undefined) throw new Error(`the p2p port ${config.podIP}:${config.p2pPort} cannot be opened: ${cause}`)
    throw err
  }
}

/** Peers and routing-table gauges, refreshed every 2 s. */
function startGauges (node: SwarmNode, metrics: AgentMetrics): NodeJS.Timeout {
  const gauges = setInterval(() => {
    metrics.peersConnected.set(node.getPeers().length)
    metrics.routingTableSize.set(routingTableSize(node))
  }, 2000)
  gauges.unref()
  return gauges
}

/** Connections by kind (direct, hole-punched, relayed) into the metrics, as they open and close. */
function trackConnectionKinds (node: SwarmNode, metrics: AgentMetrics): ConnectionKinds {
  const kinds = new ConnectionKinds(node, (_, opened) => { metrics.connectionsOpened.labels(opened).inc() })
  const refresh = setInterval(() => { const open = kinds.open(); for (const k of CONNECTION_KINDS) metrics.connections.labels(k).set(open[k]) }, 2000)
  refresh.unref()
  node.addEventListener('stop', () => { clearInterval(refresh); kinds.stop() }, { once: true })
  return kinds
}

/**
 * How the swarm reaches this agent (./net/reach.ts), said in one log line. An agent behind NAT
 * without a relay slot cannot be dialled, so it averages as a client (sends its parts, receives
 * the means, reduces nothing) whatever AVS_MODE says; its join requests then carry mode CLIENT,
 * which is what keeps leaders from making it a reducer and followers from asking it to lead.
 * Its DHT stays a client: nobody could reach it to ask. Where a relay may come later (bootstrap
 * peers to ask), it keeps looking for a slot, and with one averages in its configured mode from
 * the next round (`modes`). A relayed agent whose slot is lost (the relay restarted) reserves again.
 */
async function reachSwarm (node: SwarmNode, config: AgentConfig, joined: boolean, metrics: AgentMetrics, modes: AveragingMode, log: Log): Promise<{ reach: Reachability, averager: AveragerConfig, watchdog?: NodeJS.Timeout }> {
  const reach = await establishReachability(node, config.reachability, { announced: config.announceAddrs.length > 0, bootstrapped: joined && config.bootstrapPeers.length > 0 }, log)
  metrics.reachability.labels(reach.kind).set(1)
  const mode = modes.reachedBy(reach)
  // Peers may add us to their routing tables only now, with the addresses we announce now.
  if (reach.kind !== 'unreachable') await node.services.dht.setMode('server')
  if (reach.kind === 'public') {
    log.info(`reachable: yes (${reach.why})`)
    return { reach, averager: config.averager }
  }
  const again = (slot: { relay: string }): void => { log.info(`reserved a relay slot again, on ${slot.relay}`) }
  if (reach.kind === 'relayed') {
    log.info({ addrs: reach.addrs }, `reachable: no, reserved relay slot on ${reach.relay} (${reach.why})`)
    return { reach, averager: config.averager, watchdog: watchRelaySlot(node, config, log, again) }
  }
  if (mode === 'client') log.warn(`reachable: no, and no relay slot (${reach.why}): averaging as a client`)
  else log.warn(`reachable: no, and no relay slot (${reach.why}): an unreachable ${mode} agent reduces nothing anybody can send it`)
  // A relay pod not up yet (a rollout, a volunteer started first) or restarting when we joined.
  if (config.bootstrapPeers.length === 0) return { reach, averager: { ...config.averager, mode } }
  let relayed = false
  const watchdog = watchRelaySlot(node, config, log, (slot) => {
    if (relayed) { again(slot); return }
    relayed = true
    metrics.reachability.labels('unreachable').set(0)
    metrics.reachability.labels('relayed').set(1)
    const now = modes.reachedBy({ kind: 'relayed', why: 'a relay slot reserved after joining', ...slot })
    log.info({ addrs: slot.addrs }, `reserved a relay slot on ${slot.relay}: reachable through it, averaging as a${now === 'auxiliary' ? 'n' : ''} ${now} from the next round`)
    void node.services.dht.setMode('server').catch((err: unknown) => { log.warn(`the DHT stays a client: ${describeError(err)}`) })
  })
  return { reach, averager: { ...config.averager, mode }, watchdog }
}

/**
 * Reserves a relay slot whenever this agent holds none; `onSlot` hears of each one it reserves.
 * Checked often: until the slot is back, members behind other NATs cannot reach us (a relay
 * restarted, SIGKILLed and back 2 s later, left them apart 21-26 s with a 30 s check:
 * test/reliability/relay-restart.test.ts). The check is a look at our addresses; one
 * reservation at a time, and after relays we asked all refused, the next ask waits twice as
 * long (up to 30 s), so they are not asked, nor their refusals logged, every few seconds.
 */
function watchRelaySlot (node: SwarmNode, config: AgentConfig, log: Log, onSlot: (slot: { relay: string, addrs: string[] }) => void): NodeJS.Timeout {
  let reserving = false
  let wait = RELAY_SLOT_CHECK_MS
  let nextTry = 0
  const watchdog = setInterval(() => {
    if (reserving || Date.now() < nextTry || circuitAddrs(node).length > 0 || node.status !== 'started') return
    reserving = true
    const asked = { relays: 0 }
    let dialed = false
    void reserveRelaySlot(node, log, asked)
      .then(async slot => {
        if (slot !== undefined || asked.relays > 0 || config.bootstrapPeers.length === 0) return slot
        dialed = true
        // No relay among our connections: libp2p redials a lost bootstrap peer for ~31 s, and later
        // only a lookup that picks it would (a relay pod rescheduled for longer, in a swarm where
        // it is not a key's replica, was never met again). The bootstrap peers are the swarm's
        // relays: dial them once, then ask.
        const connected = await connectBootstrap(node, { peers: config.bootstrapPeers, dnsServers: config.dnsServers, log, signal: AbortSignal.timeout(15_000), attempts: 1 })
        return connected ? await reserveRelaySlot(node, log, asked) : undefined
      })
      .then(slot => {
        if (slot !== undefined) onSlot(slot)
        wait = slot === undefined && (asked.relays > 0 || dialed) ? Math.min(2 * wait, 30_000) : RELAY_SLOT_CHECK_MS
        nextTry = Date.now() + wait - RELAY_SLOT_CHECK_MS
      })
      .finally(() => { reserving = false })
  }, RELAY_SLOT_CHECK_MS)
  watchdog.unref()
  return watchdog
}

/**
 * The mode the agent's averagers run in, as how the swarm reaches the agent allows (modeFor): a
 * client while nobody can dial it, its configured mode once it is reachable. An averager created
 * later starts in it; one running takes it from its next round (DecentralizedAverager.becomeReachable).
 * Only that way: a relayed agent that loses its slot keeps its mode (the watchdog reserves again).
 */
class AveragingMode {
  private current: AveragerMode
  private readonly averagers: DecentralizedAverager[] = []

  /** Called when an averager runs in a mode others dial (created so, or after becomeReachable); again at each change. */
  onServing: (averager: DecentralizedAverager) => void = () => {}

  constructor (private readonly configured: AveragerMode, private readonly log: Log, private readonly onChange: (mode: AveragerMode) => void) {
    this.current = configured
  }

  get mode (): AveragerMode { return this.current }

  /** The mode `reach` allows; running averagers follow it. */
  reachedBy (reach: Reachability): AveragerMode {
    const mode = modeFor(reach, this.configured)
    if (mode !== this.current) {
      this.current = mode
      this.onChange(mode)
      for (const averager of this.averagers) void this.align(averager)
    }
    return mode
  }

  /** An averager created in `mode`: it follows from now on, and catches up if reachability changed while it was created. */
  async follow (averager: DecentralizedAverager): Promise<void> {
    this.averagers.push(averager)
    await this.align(averager)
  }

  private async align (averager: DecentralizedAverager): Promise<void> {
    const mode = this.current
    if (mode !== 'client' && averager.config.mode === 'client') {
      await averager.becomeReachable(mode).catch((err: unknown) => {
        this.log.warn(`averaging as a client still, though reachable now: serving as a ${mode} failed: ${describeError(err)}`)
      })
    }
    if (averager.config.mode !== 'client') this.onServing(averager)
  }
}

/**
 * SIGTERM and SIGINT: the current round finishes, then the agent leaves; a round still running
 * shortly before the kill (the grace period after the signal) hands our span off (leave-notice.ts).
 */
function abortOnSignals (log: Log, graceSeconds: number): AbortController {
  const shutdown = new AbortController()
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      const notice = new LeaveNotice(signal, Date.now(), graceSeconds * 1000)
      log.info(`${notice.message} (a round still running in ${((notice.handOffAt - notice.at) / 1000).toFixed(1)} s hands our span to the group: the kill comes ${graceSeconds} s after the signal)`)
      shutdown.abort(notice)
    })
  }
  return shutdown
}

/**
 * Joins the swarm through the bootstrap peers and learns how it is reached (`reach`, which turns
 * the DHT server where it can be); returns whether it joined, `routed`, which settles once the
 * routing table holds a peer (the first round waits for it: the rendezvous finds a key's replicas
 * through the closer peers they name, so a table still filling is enough), `settled`, once the
 * table stopped growing (readiness), and a watchdog that joins again whenever the routing table
 * runs empty (peers gone, Identify lost under load). The workload starts meanwhile: a restarted
 * agent's trainer registers and its state downloads while the table fills.
 */
async function joinSwarm<R> (node: SwarmNode, config: AgentConfig, signal: AbortSignal, log: Log, reach: (joined: boolean) => Promise<R>): Promise<{ joined: boolean, routed: Promise<unknown>, settled: Promise<void>, watchdog: NodeJS.Timeout, reached: R }> {
  const bootstrapOptions = { peers: config.bootstrapPeers, dnsServers: config.dnsServers, signal, log }
  const joined = await connectBootstrap(node, bootstrapOptions)
  const reached = await reach(joined)
  const settling = Date.now()
  const settled = joined && config.bootstrapPeers.length > 0
    ? settleRoutingTable(node)
      .then(async size => { log.info(`routing table settled at ${size === 0 ? await rejoinWhileIsolated(node, bootstrapOptions) : size} peers in ${Date.now() - settling} ms`) })
      .catch((err: unknown) => { log.warn(`settling the routing table failed: ${describeError(err)}`) })
    : Promise.resolve()
  // An isolated agent (its table empty after the settle) rejoins first: `settled` covers that.
  const routed = Promise.race([awaitFirstPeer(node, SETTLE_MAX_MS).then(found => found ? undefined : settled), settled])
  let rejoining = false
  const watchdog = setInterval(() => {
    if (rejoining || config.bootstrapPeers.length === 0 || routingTableSize(node) > 0 || signal.aborted) return
    rejoining = true
    void rejoinWhileIsolated(node, bootstrapOptions, 1).finally(() => { rejoining = false })
  }, 30_000)
  watchdog.unref()
  return { joined, routed, settled, watchdog, reached }
}

/** An averager for the workload's tensors, its rounds counted in the metrics and its data channel logged. */
async function createAverager (node: SwarmNode, config: AgentConfig, metrics: AgentMetrics, log: Log, tensors: Parameters<WorkloadContext['createAverager']>[0], hooks: Parameters<WorkloadContext['createAverager']>[1]): Promise<DecentralizedAverager> {
  // Bits set in the spec are the user's layout; empty ones follow the operator's membership.
  const grid = config.membersDir !== undefined && config.averager.initialGroupBits === ''
    ? new GridLayout(config.membersDir, config.podName, config.averager.targetGroupSize, line => { log.warn(line) })
    : undefined
  const averager = await DecentralizedAverager.create(node, tensors, config.averager, {
    log: log.child({ component: 'averager' }),
    ...(grid !== undefined ? { gridBits: () => grid.bits() } : {}),
    ...hooks,
    onEarlyAssembly: (saved) => {
      metrics.earlyAssemblies.inc()
      metrics.earlyAssemblySavedSeconds.inc(saved)
    },
    onStep: (outcome, detail) => {
      metrics.recordRound(outcome, detail)
      const banned = detail.result?.bannedSenders ?? []
      if (banned.length > 0) log.warn(`left ${banned.length} group member(s) out of the span we reduced (failed, too slow or sent invalid parts): ${banned.join(', ')}`)
      hooks?.onStep?.(outcome, detail)
    }
  })
  const path = averager.dataChannel
  log.info(path.kind === 'direct'
    ? `tensor parts travel over the direct TLS data channel${path.port > 0 ? ` (listening on port ${path.port})` : ''}${path.threads > 0 ? ` carried by ${path.threads} data thread(s)` : ' on the main thread'}, falling back to libp2p streams`
    : 'tensor parts travel over libp2p streams')
  log.info(`parts are checked and summed by the ${averager.kernelBackend} kernels`)
  return averager
}

/**
 * Newcomers start from a live peer's tensors (hivemind's load_state_from_peers); every agent
 * then offers its own. A client downloads as any newcomer does (it averaged from its own initial
 * tensors before: a volunteer behind NAT without a relay slot averaged a fresh model into the
 * swarm's), and serves only once it is reachable (`reachable`, AveragingMode). Auxiliary peers hold
 * no state of their own.
 */
function stateSharingFor (node: SwarmNode, config: AgentConfig, metrics: AgentMetrics, log: Log, announce: AnnounceFile | undefined): StateSharing | undefined {
  // A bootstrap agent with no bootstrap peers of its own is dialled by the others: restarted, it
  // waits for them before it looks for the swarm's state (unless the membership says it is alone).
  const membership = config.membersDir !== undefined ? readMembership(config.membersDir) : undefined
  const lone = config.bootstrapPeers.length === 0 && (membership === undefined || membership.members > 1)
  return config.averager.mode !== 'auxiliary'
    ? new StateSharing(node, {
      serving: config.averager.mode === 'node',
      prefix: config.averager.prefix,
      requestTimeoutMs: config.averager.requestTimeout * 1000,
      directChannel: (config.averager.dataChannel ?? 'direct') === 'direct',
      ...dataAddrsOf(announce),
      ...(lone ? { peersFirst: async () => await awaitFirstPeer(node) } : {}),
      log: log.child({ component: 'state' }),
      onUpload: (outcome) => { if (outcome === 'served') metrics.stateUploads.inc() },
      onDownload: (outcome) => { metrics.stateDownloads.labels(outcome).inc() }
    })
    : undefined
}

/** The configured workload (builtin training or the sidecar API) over the agent's parts. */
function workloadOf (config: AgentConfig, ctx: WorkloadContext, stateSharing: StateSharing | undefined): Workload {
  return config.workload === 'builtin'
    ? builtinWorkload(ctx, { shardIndex: config.shardIndex, stateSharing })
    : sidecarWorkload(ctx, { host: '127.0.0.1', port: config.sidecarPort, stateSharing, shmDir: config.shmDir })
}

/** The agent's configuration from its env, or undefined after one line on stderr saying why not. */
function loadConfig (): AgentConfig | undefined {
  try {
    return loadAgentConfig(process.env)
  } catch (err) {
    // One line, the last the agent writes: the kubelet keeps it as the termination message
    // (FallbackToLogsOnError) and the operator shows it in the swarm's Degraded condition.
    process.stderr.write(`${fatalLine('agent configuration is invalid', err)}\n`)
    return undefined
  }
}

/** Where the announce file says our data port is reached (a node port), for the averager and state sharing. */
function dataAddrsOf (announce: AnnounceFile | undefined): { dataAddrs?: () => readonly Multiaddr[] } {
  return announce === undefined ? {} : { dataAddrs: () => announce.dataAddrs }
}

/** The addresses of AVS_ANNOUNCE_FILE, read once before the node starts; undefined without one. */
async function readAnnounceFile (config: AgentConfig, log: Log): Promise<AnnounceFile | undefined> {
  const announce = config.announceFile === undefined ? undefined : new AnnounceFile(config.announceFile, log)
  await announce?.reread()
  return announce
}

/** Checkpoints when the spec asks for them. */
function checkpointerFor (config: AgentConfig, metrics: AgentMetrics, log: Log): Checkpointer | undefined {
  return config.checkpoint !== undefined
    ? new Checkpointer(config.checkpoint, config.swarm, metrics, { info: (m) => { log.info(m) }, warn: (m) => { log.warn(m) } })
    : undefined
}

/** What a running agent started, for stopAgent. */
interface RunningAgent {
  gauges: NodeJS.Timeout
  announce?: AnnounceFile
  watchdogs: Array<NodeJS.Timeout | undefined>
  stateSharing?: StateSharing
  checkpointer?: Checkpointer
  node: SwarmNode
  server: Server
  log: Log
}

/** Stops what the agent started, in this order, once its workload returned or failed. */
async function stopAgent (a: RunningAgent): Promise<void> {
  clearInterval(a.gauges)
  a.announce?.stop()
  for (const watchdog of a.watchdogs) clearInterval(watchdog)
  await a.stateSharing?.stop().catch(() => {})
  a.checkpointer?.close()
  await a.node.stop()
  a.server.close()
  a.log.info('agent stopped')
}

async function main (): Promise<number> {
  // Milliseconds since the process began: its modules are loaded (part of a restarted agent's way back into rounds).
  const modulesLoaded = performance.now()
  let config = loadConfig()
  if (config === undefined) return 2
  const log = pino({ level: config.logLevel, base: { swarm: config.swarm, pod: config.podName } })
  const metrics = new AgentMetrics(config.swarm)
  // Ready: the workload says so (the trainer registered) and the routing table settled.
  let ready = false
  let settled = false
  const announce = await readAnnounceFile(config, log)
  const node = await startNode(config, metrics, log, announce)
  // A changed address goes into our peer record, which identify pushes to the peers we know.
  announce?.watch(ANNOUNCE_REREAD_MS, () => { void node.peerStore.patch(node.peerId, { multiaddrs: node.getMultiaddrs().map(a => a.decapsulateCode(P2P_CODE)) }).catch(() => {}) })
  const server = await startMetricsServer(config.podIP, config.metricsPort, metrics.registry, { live: () => true, ready: () => ready && settled })
  const startup = { modulesMs: Math.round(modulesLoaded), nodeMs: Math.round(performance.now() - modulesLoaded) }
  log.info({ peerId: node.peerId.toString(), addrs: node.getMultiaddrs().map(String), metricsPort: config.metricsPort, startup }, 'agent started')
  // A sidecar agent's trainer owns the model: tfjs (0.35 s of CPU at every start, a restart's
  // way back into rounds) is loaded only by the builtin workload that trains with it.
  const backend = config.workload === 'builtin' ? (await loadTensorBackend()).name : 'trainer'
  const gauges = startGauges(node, metrics)
  trackConnectionKinds(node, metrics)
  const shutdown = abortOnSignals(log, config.terminationGraceSeconds)
  const workload = config.workload
  const modes = new AveragingMode(config.averager.mode, log, (mode) => { metrics.info.reset(); metrics.info.labels(backend, mode, workload, VERSION).set(1) })
  const { joined, routed, settled: tableSettled, watchdog, reached } = await joinSwarm(node, config, shutdown.signal, log, async (joined) => await reachSwarm(node, config!, joined, metrics, modes, log))
  void tableSettled.then(() => { settled = true })
  config = { ...config, averager: reached.averager }
  metrics.info.labels(backend, modes.mode, config.workload, VERSION).set(1)
  const checkpointer = checkpointerFor(config, metrics, log)
  const ctx: WorkloadContext = {
    node, averagerConfig: config.averager, period: config.period, metrics, log, signal: shutdown.signal,
    checkpointer, completionRounds: config.completionRounds, completionDeadline: config.completionDeadline, completionOnTrainerExit: config.completionOnTrainerExit,
    createAverager: async (tensors, hooks) => {
      const averager = await createAverager(node, { ...config, averager: { ...config.averager, mode: modes.mode } }, metrics, log, tensors, { ...hooks, routed, ...dataAddrsOf(announce) })
      await modes.follow(averager)
      handOffOnNotice(shutdown.signal, averager)
      return averager
    },
    setReady: (value) => { ready = value && joined }
  }
  const stateSharing = stateSharingFor(node, { ...config, averager: { ...config.averager, mode: modes.mode } }, metrics, log, announce)
  // A client that became reachable offers its state too, over the data channel it now listens on.
  modes.onServing = (averager) => {
    if (averager.config.mode !== 'node') return
    void stateSharing?.serve(averager.directEndpoint()).catch((err: unknown) => { log.warn(`serving our state failed: ${describeError(err)}`) })
  }
  try {
    if (joined) await workloadOf(config, ctx, stateSharing).run()
  } finally {
    ready = false
    await stopAgent({ gauges, announce, watchdogs: [watchdog, reached.watchdog], stateSharing, checkpointer, node, server, log })
  }
  return 0
}

/**
 * Once the agent stopped, its process leaves: libp2p's own debounced timers (identify push and the
 * address manager's peer store update, 1 s each, armed by the events of its own stop) kept it
 * alive ~2 s longer, and a pod leaving on SIGTERM down that much longer (chaos harness: 2.1 s from
 * SIGTERM to exit, 50 ms of it ours). An unreferenced timer fires only while something else holds
 * the process, so one that exits quickly never waits for it. pino flushes its log on exit; a last
 * line on stderr gets the grace to leave its pipe.
 */
const EXIT_GRACE_MS = 200

function exitOnceStopped (code: number): void {
  process.exitCode = code
  setTimeout(() => { process.exit() }, EXIT_GRACE_MS).unref()
}

main().then(exitOnceStopped, (err) => {
  process.stderr.write(`${fatalLine('agent failed', err)}\n`)
  exitOnceStopped(1)
})
