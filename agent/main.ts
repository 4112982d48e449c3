#!/usr/bin/env node
// The averaging agent: one process per pod (or per local-runtime agent), configured only by
// the environment contract in api/agent-env.ts.
import { pino } from 'pino'
import { privateKeyFromProtobuf } from '@libp2p/crypto/keys'
import { prometheusMetrics } from '@libp2p/prometheus-metrics'
import { loadAgentConfig } from './config.js'
import { createSwarmNode } from './net/node.js'
import { connectBootstrap, rejoinWhileIsolated, routingTableSize, settleRoutingTable } from './net/bootstrap.js'
import { Rendezvous } from './rendezvous/rendezvous.js'
import { DecentralizedAverager } from './averager.js'
import { AgentMetrics } from './metrics/agent-metrics.js'
import { startMetricsServer } from './metrics/http-server.js'
import { loadTensorBackend } from './tensors/backend.js'
import { builtinWorkload } from './workloads/builtin/workload.js'
import { sidecarWorkload } from './workloads/sidecar/workload.js'
import { StateSharing } from './state/state-sharing.js'
import type { WorkloadContext } from './workloads/context.js'
import { describeError } from './errors.js'

const VERSION = '0.1.0'

async function main (): Promise<number> {
  let config
  try {
    config = loadAgentConfig(process.env)
  } catch (err) {
    process.stderr.write(`agent configuration is invalid:\n${describeError(err).split('\n').map(l => `  - ${l}`).join('\n')}\n`)
    return 2
  }
  const log = pino({ level: config.logLevel, base: { swarm: config.swarm, pod: config.podName } })
  const metrics = new AgentMetrics(config.swarm)
  const shutdown = new AbortController()
  let ready = false
  let started = false

  const listenHost = config.podIP
  const node = await createSwarmNode({
    privateKey: config.identityKey != null ? privateKeyFromProtobuf(config.identityKey) : undefined,
    listen: [`/ip4/${listenHost}/tcp/${config.p2pPort}`],
    announce: config.announceAddrs.length > 0 ? config.announceAddrs : undefined,
    psk: config.psk,
    allowPeers: config.allowPeers,
    metrics: prometheusMetrics({ registry: metrics.registry, preserveExistingMetrics: true, collectDefaultMetrics: false })
  })
  started = true
  const server = await startMetricsServer(listenHost, config.metricsPort, metrics.registry, { live: () => started, ready: () => ready })
  log.info({ peerId: node.peerId.toString(), addrs: node.getMultiaddrs().map(String), metricsPort: config.metricsPort }, 'agent started')

  const { name: backend } = await loadTensorBackend()
  metrics.info.labels(backend, config.averager.mode, config.workload, VERSION).set(1)
  const gauges = setInterval(() => {
    metrics.peersConnected.set(node.getPeers().length)
    metrics.routingTableSize.set(routingTableSize(node))
  }, 2000)
  gauges.unref()

  const rendezvous = new Rendezvous(node, { requestTimeoutMs: config.averager.requestTimeout * 1000, log: (m) => { log.debug(m) } })
  await rendezvous.start()

  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      log.info(`${signal}: finishing the current round, then leaving`)
      shutdown.abort()
    })
  }

  const joined = await connectBootstrap(node, {
    peers: config.bootstrapPeers, dnsServers: config.dnsServers, signal: shutdown.signal, log: (m) => { log.info(m) }
  })
  const bootstrapOptions = { peers: config.bootstrapPeers, dnsServers: config.dnsServers, signal: shutdown.signal, log: (m: string) => { log.info(m) } }
  if (joined && config.bootstrapPeers.length > 0) {
    const size = await settleRoutingTable(node)
    log.info(`routing table settled at ${size === 0 ? await rejoinWhileIsolated(node, bootstrapOptions) : size} peers`)
  }
  // An agent left with an empty routing table (peers gone, Identify lost under load) joins again.
  let rejoining = false
  const watchdog = setInterval(() => {
    if (rejoining || config.bootstrapPeers.length === 0 || routingTableSize(node) > 0 || shutdown.signal.aborted) return
    rejoining = true
    void rejoinWhileIsolated(node, bootstrapOptions, 1).finally(() => { rejoining = false })
  }, 30_000)
  watchdog.unref()
  const ctx: WorkloadContext = {
    node,
    rendezvous,
    averagerConfig: config.averager,
    period: config.period,
    metrics,
    log,
    signal: shutdown.signal,
    createAverager: async (tensors, hooks) => {
      const averager = await DecentralizedAverager.create(node, tensors, config.averager, {
        log: (m) => { log.debug(m) },
        ...hooks,
        onStep: (outcome, detail) => {
          metrics.recordRound(outcome, detail)
          const banned = detail.result?.bannedSenders ?? []
          if (banned.length > 0) log.warn(`left ${banned.length} group member(s) out of the span we reduced (failed, too slow or sent invalid parts): ${banned.join(', ')}`)
          hooks?.onStep?.(outcome, detail)
        }
      }, rendezvous)
      const path = averager.dataPath
      log.info(path.kind === 'direct'
        ? `tensor parts travel over the direct TLS data channel${path.port > 0 ? ` (listening on port ${path.port})` : ''}${path.threads > 0 ? ` carried by ${path.threads} data thread(s)` : ' on the main thread'}, falling back to libp2p streams`
        : 'tensor parts travel over libp2p streams')
      log.info(`parts are checked and summed by the ${averager.kernelBackend} kernels`)
      return averager
    },
    setReady: (value) => { ready = value && joined }
  }
  // Newcomers start from a live peer's tensors (hivemind's load_state_from_peers); every agent
  // then offers its own. Auxiliary and client peers hold no state worth sharing.
  const stateSharing = config.averager.mode === 'node'
    ? new StateSharing(node, rendezvous, {
      prefix: config.averager.prefix,
      requestTimeoutMs: config.averager.requestTimeout * 1000,
      log: (m) => { log.debug(m) },
      onUpload: (outcome) => { if (outcome === 'served') metrics.stateUploads.inc() },
      onDownload: (outcome) => { metrics.stateDownloads.labels(outcome).inc() }
    })
    : undefined
  const workload = config.workload === 'builtin'
    ? builtinWorkload(ctx, { shardIndex: config.shardIndex, stateSharing })
    : sidecarWorkload(ctx, { host: '127.0.0.1', port: config.sidecarPort, stateSharing, shmDir: config.shmDir })
  try {
    if (joined) await workload.run()
  } finally {
    ready = false
    clearInterval(gauges)
    clearInterval(watchdog)
    await stateSharing?.stop().catch(() => {})
    await rendezvous.stop()
    await node.stop()
    server.close()
    log.info('agent stopped')
  }
  return 0
}

main().then((code) => { process.exitCode = code }, (err) => {
  process.stderr.write(`agent failed: ${describeError(err)}\n`)
  process.exitCode = 1
})
