// A relay down longer than libp2p's redials (a relay pod rescheduled, its image pulled again). A
// member behind NAT keeps its relay slot by watching its addresses (agent/main.ts reachSwarm) and
// reserves again from a relay it is connected to; libp2p redials a lost bootstrap peer it keeps alive
// 1, 2, 4, 8 and 16 s after the disconnect, then never again, and a member whose routing table still
// holds other peers does not rejoin through the bootstrap peers. So after ~31 s down, nothing dialled
// the relay again and the member stayed without a slot (unreachable) however long the relay was back.
// Real agent processes on loopback addresses (no root needed): the relay (the bootstrap agent, its
// identity key kept across the restart), a public member, and a member that calls itself private.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { AGENT_ENV } from '../../api/agent-env.js'
import { AGENT_METRICS } from '../../api/metric-names.js'
import { buildSidecarSwarm, type SwarmTiming } from '../../tools/faults/sidecar-swarm.js'
import { sleep } from '../harness/time.js'
import { waitFor } from '../harness/wait.js'
import { AgentProcess, agentEnv, stopAgents } from '../../agent/process/agent-process.js'
import { logged, metricAt } from './loopback-agents.js'

const P2P_PORT = 31338
const METRICS_PORT = 9410
/** Longer than libp2p's five redials of a kept-alive peer (1 + 2 + 4 + 8 + 16 s after the disconnect). */
const DOWN_MS = 36_000
/** From the relay's restart to the member's slot: a watchdog look (3 s, backing off to 30 s while no relay answered), a dial, a reservation. */
const BACK_WITHIN_MS = 45_000

const TIMING: SwarmTiming = { targetGroupSize: 3, minGroupSize: 2, averagingExpiration: 3, requestTimeout: 1, allreduceTimeout: 10 }

async function metric (ip: string, name: string, labels: Record<string, string> = {}): Promise<number | undefined> {
  return await metricAt(ip, METRICS_PORT, name, labels)
}

test('a member behind NAT reserves a relay slot again after the relay was down longer than libp2p redials it', { timeout: 180_000 }, async (t) => {
  const logDir = mkdtempSync(join(tmpdir(), 'avs-relay-long-down-'))
  const ips = ['127.0.0.61', '127.0.0.62', '127.0.0.63']
  // The operator's own env for a sidecar swarm of 3: agent 0 the bootstrap agent, which serves the
  // relay (its identity key from the identity Secret, kept across the restart), 1 and 2 members.
  const { agents: pods } = await buildSidecarSwarm({
    name: 'ld', replicas: 3, bootstrapReplicas: 1, timing: TIMING, ips, sidecarPorts: [9461, 9462, 9463],
    p2pPort: P2P_PORT, metricsPort: METRICS_PORT, membersDir: join(logDir, 'members')
  })
  assert.equal(pods[0].env[AGENT_ENV.relay.name], 'serve', 'the bootstrap agent serves the relay')
  const relay = new AgentProcess({ name: 'relay', logDir, env: { ...pods[0].env, ...agentEnv({ reachability: 'public' }) } })
  const member = new AgentProcess({ name: 'public', logDir, env: { ...pods[1].env, ...agentEnv({ reachability: 'public' }) } })
  // Behind NAT as far as it knows (loopback has none): it reserves a slot and watches it.
  const natted = new AgentProcess({ name: 'private', logDir, env: { ...pods[2].env, ...agentEnv({ reachability: 'private', logLevel: 'debug' }) } })
  const agents = [relay, member, natted]
  const started = Date.now()
  const elapsed = (): string => `${((Date.now() - started) / 1000).toFixed(1)} s`
  t.diagnostic(`logs in ${logDir}`)
  try {
    // The public member first, a DHT server in the relay's routing table before the private member
    // joins: the private member's first lookups then find it.
    relay.start()
    member.start()
    await waitFor('the public member in the relay\'s routing table', async () => (await metric(ips[0], AGENT_METRICS.routingTableSize.name) ?? 0) >= 1, 30_000)
    natted.start()
    const relayed = async (): Promise<boolean> => await metric(ips[2], AGENT_METRICS.reachability.name, { kind: 'relayed' }) === 1
    await waitFor(`a relay slot for the private member (see ${natted.logPath})`, relayed, 30_000)
    // Its routing table holds the public member too, so losing the relay does not empty it (an empty
    // table makes the agent rejoin through its bootstrap peers, which would dial the relay anyway).
    await waitFor('the relay and the public member in the private member\'s routing table', async () => (await metric(ips[2], AGENT_METRICS.routingTableSize.name) ?? 0) >= 2, 30_000)
    t.diagnostic(`${elapsed()} the private member holds a slot on the relay; its routing table: ${await metric(ips[2], AGENT_METRICS.routingTableSize.name)} peers`)

    await relay.killAndWait()
    t.diagnostic(`${elapsed()} relay killed; down ${DOWN_MS / 1000} s`)
    await sleep(DOWN_MS)
    const kept = await metric(ips[2], AGENT_METRICS.routingTableSize.name) ?? 0
    relay.start()
    const restartedAt = Date.now()
    t.diagnostic(`${elapsed()} relay started again (the private member's routing table: ${kept} peers)`)
    assert.ok(kept >= 1, 'the private member\'s routing table did not empty while the relay was down (the case this test is about)')

    const back = await waitFor('the slot again', async () => logged(natted.logPath, /reserved a relay slot again/).length > 0, BACK_WITHIN_MS).catch(() => false)
    t.diagnostic(`${elapsed()} ${back ? `slot again ${((Date.now() - restartedAt) / 1000).toFixed(1)} s after the restart` : 'no slot again'}`)
    assert.ok(back, `the private member never reserved a relay slot again within ${BACK_WITHIN_MS / 1000} s of the relay's restart: see ${natted.logPath}`)
    for (const a of agents) assert.ok(a.running, `agent ${a.name} is running`)
  } finally {
    await stopAgents(agents)
  }
})
