import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { createServer, type Server } from 'node:net'
import { AGENT_BUNDLE, agentEnv } from '../../agent/process/agent-process.js'
import { freePorts, listenOn } from '../../agent/util/ports.js'

// A port the agent cannot listen on (taken by another process on a host-network node, a wrong
// podIP) ends the agent with one sentence naming the port, which becomes the pod's termination
// message and the swarm's Degraded condition; libp2p's own message had a stack trace in it.

async function hold (): Promise<{ server: Server, port: number }> {
  const server = createServer()
  await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(0, '127.0.0.1', resolve) })
  return { server, port: (server.address() as { port: number }).port }
}

async function agentExit (env: Record<string, string>): Promise<{ code: number | null, stderr: string }> {
  const child = spawn(process.execPath, [AGENT_BUNDLE], { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const code = await new Promise<number | null>(resolve => child.on('exit', resolve))
  return { code, stderr: stderr.trim() }
}

for (const [index, what] of [[0, 'p2p'], [1, 'metrics'], [2, 'sidecar']] as const) {
  test(`an agent whose ${what} port is taken exits with one sentence naming it`, { timeout: 60_000 }, async () => {
    const taken = await hold()
    try {
      const ports = await freePorts(3)
      ports[index] = taken.port
      const { code, stderr } = await agentExit(agentEnv({
        swarm: 'ports', podName: 'ports-0', podIP: '127.0.0.1', prefix: 'ports', p2pPort: ports[0], metricsPort: ports[1], workload: 'sidecar', sidecarPort: ports[2]
      }))
      assert.equal(code, 1, stderr)
      assert.equal(stderr.split('\n').at(-1), `agent failed: the ${what} port 127.0.0.1:${taken.port} is already in use`)
      assert.doesNotMatch(stderr, /\bat .+:\d+:\d+/, 'no stack trace')
    } finally {
      taken.server.close()
    }
  })
}

test('listenOn: an address that is not ours is named with the reason', async () => {
  const server = createServer()
  // 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never assigned to this machine.
  await assert.rejects(listenOn(server, 'metrics', '192.0.2.1', 9400), { message: 'the metrics port 192.0.2.1:9400 cannot be opened: listen EADDRNOTAVAIL: address not available 192.0.2.1:9400' })
  const ok = createServer()
  await listenOn(ok, 'metrics', '127.0.0.1', 0)
  ok.close()
})
