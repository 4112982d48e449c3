import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { buildSidecarSwarm } from '../../tools/faults/sidecar-swarm.js'
import { AgentProcess, agentEnv, stopAgents } from '../../agent/process/agent-process.js'
import { freePorts } from '../../agent/util/ports.js'
import { SidecarClient, type StepResult } from '../../clients/typescript/sidecar-client.js'
import { loadNewestCheckpoint } from '../../agent/checkpoint/index.js'

const AGENTS = 4
const EVERY = 2
const ROUNDS = 5
const SPECS = [{ name: 'w', shape: [20_000] }, { name: 'b', shape: [16] }]
const initial = (peer: number, name: string, n: number): Float32Array => Float32Array.from({ length: n }, (_, i) => Math.cos(peer * 3.1 + i * 0.001 + name.length) * (peer + 2))

/** averaging_checkpoint_round of the agent at `ip` (metrics on port 9400): the newest round it knows durable. */
async function durableRound (ip: string): Promise<number> {
  const text = await (await fetch(`http://${ip}:9400/metrics`)).text()
  const line = text.split('\n').find(l => l.startsWith('averaging_checkpoint_round'))
  return line === undefined ? -1 : Number(line.split(' ').at(-1))
}

/** Registers, retrying while the agent process is still starting (connection refused). */
async function register (client: SidecarClient): Promise<void> {
  const until = Date.now() + 60_000
  for (;;) {
    try { await client.register(SPECS); return } catch (err) {
      if (Date.now() > until || !/fetch failed|ECONNREFUSED/.test(String((err as Error).cause ?? err))) throw err
      await new Promise(resolve => setTimeout(resolve, 250))
    }
  }
}

// Checkpoints' proof: every agent of a swarm is SIGKILLed at once mid-run; started again, the swarm
// comes back from the newest checkpoint, having lost at most one interval of rounds (plus the write
// that was under way at the kill, if any), and nothing that an agent had reported durable.
test('a swarm whose every agent is killed at once comes back from its newest checkpoint', { timeout: 300_000 }, async () => {
  const outDir = mkdtempSync(join(tmpdir(), 'avs-restore-'))
  const checkpoints = join(outDir, 'checkpoints')
  const subnet = 1 + (process.pid % 200)
  const ips = Array.from({ length: AGENTS }, (_, i) => `127.78.${subnet}.${10 + i}`)
  const { agents } = await buildSidecarSwarm({
    name: 'restore', replicas: AGENTS, bootstrapReplicas: 1, ips, sidecarPorts: await freePorts(AGENTS), p2pPort: 31337, metricsPort: 9400, membersDir: join(outDir, 'members'),
    timing: { targetGroupSize: AGENTS, minGroupSize: 2, averagingExpiration: 3, requestTimeout: 1, allreduceTimeout: 10 }
  })
  const extra = agentEnv({ checkpointDir: checkpoints, checkpointEvery: EVERY, checkpointKeep: 3 })
  const procs = agents.map(a => new AgentProcess({ name: a.name, env: { ...a.env, ...extra }, logDir: outDir }))
  const clients = agents.map(a => new SidecarClient(`http://127.0.0.1:${a.sidecarPort}`))
  const detail = `logs: ${outDir}`
  try {
    for (const p of procs) p.start()
    await Promise.all(clients.map(register))
    let current = clients.map((_, p) => Object.fromEntries(SPECS.map(s => [s.name, initial(p, s.name, s.shape[0])])))
    const last = clients.map(() => 0)
    for (let attempt = 0; attempt < 20 && last.some(r => r < ROUNDS); attempt++) {
      const results: StepResult[] = await Promise.all(clients.map(async (c, p) => await c.step(current[p], { timeout: 15 })))
      results.forEach((r, p) => { last[p] = r.round ?? 0 })
      current = results.map(r => r.tensors)
    }
    assert.ok(last.every(r => r >= ROUNDS), `every agent averaged ${ROUNDS} rounds (${last.join(', ')})\n${detail}`)
    // What the agents report durable just before the kill: a checkpoint they said was written must survive it.
    const durable = Math.max(...await Promise.all(ips.map(async ip => await durableRound(ip))))
    // Every agent at once, with no warning; a write may be under way.
    await Promise.all(procs.map(async p => { await p.killAndWait() }))
    const { checkpoint: newest } = await loadNewestCheckpoint(checkpoints, 'restore', SPECS, { log: () => {} })
    assert.ok(newest !== null, `a checkpoint survived the kill\n${detail}`)
    const saved = newest.manifest.round
    assert.ok(saved >= durable, `checkpoint round ${saved} is not older than the round ${durable} the agents reported durable before the kill\n${detail}`)
    // The round-4 write runs in the background while round 5 averages; on a loaded machine it can
    // still be under way at the kill, and then round 2 is the newest: one interval plus the write in flight.
    const lost = Math.max(...last) - saved
    assert.ok(saved % EVERY === 0 && (lost <= EVERY || (lost <= 2 * EVERY && durable < saved + EVERY)), `checkpoint round ${saved} is within one interval (plus the write under way, durable before the kill: ${durable}) of the last round ${Math.max(...last)}\n${detail}`)

    for (const p of procs) p.start()
    await Promise.all(clients.map(register))
    const origins: string[] = []
    for (const [p, c] of clients.entries()) {
      const state = await c.state()
      origins.push(state.origin)
      assert.ok(state.origin === 'checkpoint' || state.origin === 'peers', `agent ${p} started from ${state.origin}\n${detail}`)
      for (const s of SPECS) assert.deepEqual(state.tensors[s.name], newest.tensors.get(s.name), `agent ${p}'s ${s.name} is the checkpoint's\n${detail}`)
      assert.equal((await c.status()).round, saved, `agent ${p} resumes at round ${saved}`)
    }
    assert.ok(origins.includes('checkpoint'), `some agent restored the checkpoint itself (origins ${origins.join(', ')})`)
    // And the swarm averages on from there.
    const next = await Promise.all(clients.map(async c => await c.step(Object.fromEntries(SPECS.map(s => [s.name, newest.tensors.get(s.name)!])), { timeout: 15 })))
    assert.ok(next.some(r => r.averaged && r.round === saved + 1), `the restored swarm averaged round ${saved + 1} (${next.map(r => `${r.averaged}/${r.round}`).join(', ')})\n${detail}`)
  } finally {
    await stopAgents(procs)
  }
})
