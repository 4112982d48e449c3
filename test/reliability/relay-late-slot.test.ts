// A member behind NAT that joins while the swarm's relay is down (its pod not up yet in a rollout,
// or restarting; a volunteer started first). It finds no relay slot, so nobody can dial it and it
// averages as a client. Once the relay is back it must reserve a slot and become a full member:
// lead, and reduce a span of the group's vector (agent/main.ts reachSwarm, AveragingMode;
// DecentralizedAverager.becomeReachable). Before, only an agent that held a slot watched for one,
// so this member averaged as a client for good.
// Real agent processes on loopback addresses (no root needed): the relay (the bootstrap agent, its
// identity key kept across the restart), a public member (the second bootstrap agent, through
// which the private member joins while the relay is down) and a member that calls itself private;
// a sidecar trainer for each. Addresses and ports apart from relay-long-down.test.ts's, so both may run at once.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, type ChildProcess } from 'node:child_process'
import { appendFileSync, mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { AGENT_ENV } from '../../api/agent-env.js'
import { AGENT_METRICS } from '../../api/metric-names.js'
import { buildSidecarSwarm, type SwarmTiming } from '../../tools/faults/sidecar-swarm.js'
import type { TrainerMainConfig } from '../../tools/faults/trainer-main.js'
import { waitFor } from '../harness/wait.js'
import { AgentProcess, agentEnv, stopAgents } from '../../agent/process/agent-process.js'
import { logged, metricAt } from './loopback-agents.js'

const TRAINER_MAIN = fileURLToPath(new URL('../../tools/faults/trainer-main.js', import.meta.url))
const P2P_PORT = 31348
const METRICS_PORT = 9420
const SIDECAR_PORTS = [9471, 9472, 9473]
/** 256 KiB of float32: 4 parts of the default 64 KiB, so every member of a group of 2 or 3 gets a span. */
const ELEMENTS = 65536
/**
 * From the relay's start to the private member's slot: a watchdog look every 3 s, backing off to
 * at most 30 s while the bootstrap peers it dials hold no relay, then a dial and a reservation.
 */
const SLOT_WITHIN_MS = 40_000
/** From the slot to a round in which the private member reduced a span: the round under way ends, a declaration (3 s), an all-reduce. */
const REDUCES_WITHIN_MS = 30_000

const TIMING: SwarmTiming = { targetGroupSize: 3, minGroupSize: 2, averagingExpiration: 3, requestTimeout: 1, allreduceTimeout: 10 }

test('a member behind NAT that joined while the relay was down reserves a slot once it is back and averages as a full member', { timeout: 150_000 }, async (t) => {
  const logDir = mkdtempSync(join(tmpdir(), 'avs-relay-late-slot-'))
  const ips = ['127.0.0.71', '127.0.0.72', '127.0.0.73']
  // The operator's own env for a sidecar swarm of 3 with two bootstrap agents: agent 0 serves the
  // relay (its identity key from the identity Secret, kept across the restart), agent 1 is the
  // public member, agent 2 the private one, which lists both as bootstrap peers.
  const { agents: pods } = await buildSidecarSwarm({
    name: 'ls', replicas: 3, bootstrapReplicas: 2, timing: TIMING, ips, sidecarPorts: SIDECAR_PORTS,
    p2pPort: P2P_PORT, metricsPort: METRICS_PORT, membersDir: join(logDir, 'members')
  })
  assert.equal(pods[0].env[AGENT_ENV.relay.name], 'serve', 'the first bootstrap agent serves the relay')
  for (const ip of ips.slice(0, 2)) assert.match(pods[2].env[AGENT_ENV.bootstrapPeers.name] ?? '', new RegExp(`/ip4/${ip.replace(/\./g, '\\.')}/tcp/${P2P_PORT}/p2p/`), `the private member dials ${ip} to join`)
  const relay = new AgentProcess({ name: 'relay', logDir, env: { ...pods[0].env, ...agentEnv({ reachability: 'public' }) } })
  // The swarm's only relay is agent 0: the second bootstrap agent serves none here, else the
  // private member would simply reserve its slot there.
  const member = new AgentProcess({ name: 'public', logDir, env: { ...pods[1].env, ...agentEnv({ reachability: 'public' }), [AGENT_ENV.relay.name]: 'off' } })
  const natted = new AgentProcess({ name: 'private', logDir, env: { ...pods[2].env, ...agentEnv({ reachability: 'private', logLevel: 'debug' }) } })
  const agents = [relay, member, natted]
  const trainers: ChildProcess[] = []
  const startTrainer = (i: number): void => {
    const config: TrainerMainConfig = { agents: [{ agent: i, port: SIDECAR_PORTS[i], seed: `late-slot-${i}`, offset: 0 }], elements: ELEMENTS, periodMs: 500, stepLimitMs: 60_000 }
    const child = spawn(process.execPath, [TRAINER_MAIN, JSON.stringify(config)], { stdio: ['pipe', 'pipe', 'pipe'] })
    child.stdout?.on('data', (d: Buffer) => { appendFileSync(join(logDir, `trainer-${i}.jsonl`), d) })
    child.stderr?.on('data', (d: Buffer) => { appendFileSync(join(logDir, `trainer-${i}.err`), d) })
    trainers.push(child)
  }
  const metric = async (i: number, name: string, labels: Record<string, string> = {}): Promise<number> => await metricAt(ips[i], METRICS_PORT, name, labels) ?? 0
  const started = Date.now()
  const elapsed = (): string => `${((Date.now() - started) / 1000).toFixed(1)} s`
  t.diagnostic(`logs in ${logDir}`)
  try {
    // The relay's pod is up long enough to be known, then down (killed) when the private member starts.
    relay.start()
    member.start()
    await waitFor('the public member in the relay\'s routing table', async () => await metric(0, AGENT_METRICS.routingTableSize.name) >= 1, 30_000)
    await relay.killAndWait()
    natted.start()
    await waitFor(`the private member to join without a relay (see ${natted.logPath})`, async () => logged(natted.logPath, /no relay slot .*averaging as a client/).length > 0, 30_000)
    t.diagnostic(`${elapsed()} the relay is down; the private member joined through the public member and averages as a client`)
    startTrainer(1)
    startTrainer(2)
    // A round as a client first: it takes part, and reduces nothing.
    await waitFor('a round of the private member as a client', async () => await metric(2, AGENT_METRICS.rounds.name, { outcome: 'success' }) >= 1, 30_000)
    const asClient = await metric(2, AGENT_METRICS.partsReduced.name)
    t.diagnostic(`${elapsed()} the private member averaged as a client: ${await metric(2, AGENT_METRICS.rounds.name)} rounds, ${asClient} parts reduced`)
    assert.equal(asClient, 0, 'a client reduces no span')

    relay.start()
    startTrainer(0)
    const restartedAt = Date.now()
    const since = (): string => `${((Date.now() - restartedAt) / 1000).toFixed(1)} s after the relay started`
    t.diagnostic(`${elapsed()} relay started again`)
    const slot = await waitFor('a relay slot', async () => await metric(2, AGENT_METRICS.reachability.name, { kind: 'relayed' }) === 1, SLOT_WITHIN_MS).catch(() => false)
    t.diagnostic(`${elapsed()} ${slot !== false ? `slot ${since()}` : `no slot ${since()}`}: reachability relayed ${await metric(2, AGENT_METRICS.reachability.name, { kind: 'relayed' })}, unreachable ${await metric(2, AGENT_METRICS.reachability.name, { kind: 'unreachable' })}`)
    assert.ok(slot !== false, `the private member held no relay slot ${SLOT_WITHIN_MS / 1000} s after the relay was back: see ${natted.logPath}`)
    assert.equal(await metric(2, AGENT_METRICS.reachability.name, { kind: 'unreachable' }), 0, 'no longer counted unreachable')
    assert.equal(logged(natted.logPath, /^reserved a relay slot on .*averaging as a node from the next round$/).length, 1, 'it says so once')

    const reduced = await waitFor('a span reduced by the private member', async () => await metric(2, AGENT_METRICS.partsReduced.name) > 0, REDUCES_WITHIN_MS).catch(() => false)
    t.diagnostic(`${elapsed()} ${reduced !== false ? `the private member reduced ${await metric(2, AGENT_METRICS.partsReduced.name)} parts by ${since()}` : `the private member reduced nothing by ${since()}`}; rounds ${await metric(2, AGENT_METRICS.rounds.name)}`)
    assert.ok(reduced !== false, `the private member reduced no span ${REDUCES_WITHIN_MS / 1000} s after its slot: it still averages as a client (see ${natted.logPath})`)
    assert.equal(await metric(2, AGENT_METRICS.info.name, { mode: 'node' }), 1, 'its info metric says node')
    for (const a of agents) assert.ok(a.running, `agent ${a.name} is running`)
  } finally {
    for (const c of trainers) { c.stdin?.end(); if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL') }
    await stopAgents(agents)
  }
})
