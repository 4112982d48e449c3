import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createServer, type Server } from 'node:net'
import { formatReport, runFuzz, violations } from '../../tools/faults/fuzz-agent.js'
import { freePorts } from '../../agent/util/ports.js'

// The live-agent fuzz of tools/faults/fuzz-agent.ts with 5,000 messages (the bench sends 10^5): four
// honest agent processes (sidecar workload, a round about every second) average while an
// in-process libp2p peer sends random and mutated messages over every protocol the first serves.
// 10^4 messages took 126 to 136 s here at load averages of 20 to 30 (57 to 89 s of fuzzing),
// hence 5,000; the timeout leaves room for heavier load.
const MESSAGES = 5_000

// The harness chooses its agents' ports before they bind them, so another socket can take one
// meanwhile (a run under CPU burners lost an agent to "listen EADDRINUSE"); the harness then starts
// that agent again on new ports. Every run hands agent 1 a port held here, so that path is tested.
async function holdPort (): Promise<{ server: Server, port: number }> {
  const server = createServer()
  await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(0, '127.0.0.1', resolve) })
  return { server, port: (server.address() as { port: number }).port }
}

test('a live agent survives 5,000 random and mutated messages with bounded memory while honest rounds go on', { timeout: 900_000 }, async () => {
  const taken = await holdPort()
  let first = true
  const choosePorts = async (n: number): Promise<number[]> => {
    const ports = await freePorts(n)
    if (first) ports[3] = taken.port // agent 1's p2p port
    first = false
    return ports
  }
  const report = await runFuzz({ messages: MESSAGES, agents: 4, concurrency: 64, seed: 8, afterSeconds: 15, choosePorts })
    .finally(() => { taken.server.close() })
  const table = formatReport(report)
  console.log(table)
  assert.equal(report.portRestarts, 1, 'agent 1, handed a taken port, was started again on new ones')
  assert.ok(report.messages >= MESSAGES, `sent ${report.messages} messages`)
  assert.equal(report.crashes, 0, `no agent process exited\n${table}`)
  assert.ok(report.targetAlive, 'the target still answers /healthz')
  assert.ok(report.rssMaxMiB <= report.rssBoundMiB, `target RSS max ${report.rssMaxMiB.toFixed(0)} MiB within ${report.rssBoundMiB.toFixed(0)} MiB`)
  assert.ok(report.rounds.during.ok > 0, `honest rounds succeeded while fuzzing\n${table}`)
  assert.ok(report.rounds.after.ok > 0, `honest rounds succeeded after fuzzing\n${table}`)
  for (const [protocol, s] of Object.entries(report.protocols)) {
    // Exercised: messages went out, or the agent refused or closed the streams before any could
    // (libp2p's /libp2p/dcutr takes one inbound stream at a time and closes the others at once).
    assert.ok(s.streams > 0 && (s.messages > 0 || s.refused > 0 || s.closedByAgent > 0), `${protocol} was fuzzed`)
    assert.equal(s.leftOpen, 0, `${protocol}: every stream closed by the agent within the idle bound`)
    assert.equal(s.idleClosed, s.idle, `${protocol}: idle streams timed out`)
  }
  assert.deepEqual(violations(report, MESSAGES), [])
})
