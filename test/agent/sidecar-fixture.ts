import { mkdtempSync, rmSync, existsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pino } from 'pino'
import type { SwarmNode } from '../../agent/net/node.js'
import { DecentralizedAverager, DEFAULT_AVERAGER_CONFIG, type AveragerConfig } from '../../agent/averager.js'
import { AgentMetrics } from '../../agent/metrics/agent-metrics.js'
import type { WorkloadContext } from '../../agent/workloads/context.js'
import { sidecarWorkload } from '../../agent/workloads/sidecar/workload.js'
import { StateSharing } from '../../agent/state/state-sharing.js'
import { startConnectedNodes } from '../../bench/lib/loopback-nodes.js'
import { Checkpointer } from '../../agent/checkpoint/checkpointer.js'
import type { CheckpointPolicy } from '../../agent/config.js'

export interface SidecarAgent {
  readonly node: SwarmNode
  readonly url: string
  readonly metrics: AgentMetrics
  ctx?: WorkloadContext
  ready: boolean
  /** Settles when the agent's workload ends: rejects with what ended it (e.g. spec.restoreFrom's checkpoint missing). */
  run?: Promise<void>
  /** The agent's AVS_SHM_DIR (a fresh folder under /dev/shm), when started with `shm: true`. */
  readonly shmDir?: string
}

export interface SidecarSwarm {
  readonly agents: SidecarAgent[]
  /** Aborts every agent's signal (SIGTERM) and resolves once the workloads returned and the nodes stopped. */
  stop(): Promise<void>
}

/**
 * n agents as the agent process builds them: real libp2p nodes on loopback TCP bootstrapped off
 * the first, each with its rendezvous service, metrics, and a sidecar workload on a free port.
 */
export async function startSidecarSwarm (n: number, config: Partial<AveragerConfig> = {}, options: { stateSharing?: boolean, shm?: boolean, memoryBytes?: number, checkpoint?: CheckpointPolicy, completionRounds?: number, completionDeadline?: number, completionOnTrainerExit?: boolean, swarm?: string } = {}): Promise<SidecarSwarm> {
  const nodes: SwarmNode[] = []
  const runs: Array<Promise<void>> = []
  const swarmName = options.swarm ?? 'sidecar-test'
  const controller = new AbortController()
  const agents: SidecarAgent[] = []
  const stop = async (): Promise<void> => {
    controller.abort()
    await Promise.allSettled(runs)
    await Promise.allSettled(nodes.map(async node => { await node.stop() }))
    for (const a of agents) a.ctx?.checkpointer?.close()
    for (const a of agents) if (a.shmDir !== undefined) rmSync(a.shmDir, { recursive: true, force: true })
  }
  try {
    const averagerConfig: AveragerConfig = {
      ...DEFAULT_AVERAGER_CONFIG,
      prefix: 'sidecar-test',
      averagingExpiration: 3,
      requestTimeout: 1.5,
      allreduceTimeout: 30,
      targetGroupSize: n,
      minGroupSize: n,
      ...config
    }
    nodes.push(...await startConnectedNodes(n, () => ({ rendezvous: { requestTimeoutMs: averagerConfig.requestTimeout * 1000 } })))
    for (let i = 0; i < n; i++) {
      const node = nodes[i]
      const metrics = new AgentMetrics('sidecar-test')
      const log = pino({ level: process.env.AVS_TEST_LOG != null ? 'debug' : 'silent' }).child({ peer: i })
      const shmDir = options.shm === true ? mkdtempSync(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), `avs-test-${i}-`)) : undefined
      const agent: SidecarAgent & { url: string } = { node, url: '', metrics, ready: false, shmDir }
      const ctx: WorkloadContext = {
        node,
        averagerConfig,
        period: 1,
        metrics,
        log,
        signal: controller.signal,
        checkpointer: options.checkpoint !== undefined
          ? new Checkpointer(options.checkpoint, swarmName, metrics, { info: (m) => { log.info(m) }, warn: (m) => { log.warn(m) } })
          : undefined,
        completionRounds: options.completionRounds,
        completionDeadline: options.completionDeadline,
        completionOnTrainerExit: options.completionOnTrainerExit,
        async createAverager (tensors, hooks) {
          return await DecentralizedAverager.create(node, tensors, averagerConfig, {
            ...hooks,
            onStep: (outcome, detail) => { metrics.recordRound(outcome, detail); hooks?.onStep?.(outcome, detail) }
          })
        },
        setReady (ready) { agent.ready = ready }
      }
      agent.ctx = ctx
      const listening = new Promise<string>((resolve, reject) => {
        const stateSharing = options.stateSharing === true
          ? new StateSharing(node, { prefix: averagerConfig.prefix, requestTimeoutMs: averagerConfig.requestTimeout * 1000, log })
          : undefined
        const run = sidecarWorkload(ctx, { host: '127.0.0.1', port: 0, onListening: resolve, stateSharing, shmDir, memoryBytes: options.memoryBytes }).run()
        agent.run = run
        // Before listening the error fails the start; after it, a failed shutdown shows in the output.
        runs.push(run.catch(err => { reject(err); if (process.env.AVS_TEST_LOG != null) console.error(`sidecar agent ${i} failed: ${String(err)}`) }))
      })
      agent.url = await listening
      agents.push(agent)
    }
    return { agents, stop }
  } catch (err) {
    await stop()
    throw err
  }
}

