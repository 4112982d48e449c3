import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startSidecarSwarm } from '../../sidecar-fixture.js'
import { SidecarClient, SidecarError } from '../../../../clients/typescript/sidecar-client.js'
import { fill } from '../../swarm-fixture.js'
import { RENDEZVOUS_PROTOCOL } from '../../../../agent/rendezvous/rendezvous.js'

const SPECS = [{ name: 'w', shape: [16] }]
const values = (agent: number): Record<string, Float32Array> => ({ w: fill(16, agent + 1) })

// The failure path of register shuts its averager down: that must leave the agent's rendezvous
// (shared with state sharing) serving, so that a retried register and the rounds after it work.
test('a register that fails after its averager started leaves the rendezvous serving; the retry loads the swarm state and averages', { timeout: 60_000 }, async () => {
  const swarm = await startSidecarSwarm(3, { targetGroupSize: 2, minGroupSize: 2 }, { stateSharing: true })
  try {
    const clients = swarm.agents.map(a => new SidecarClient(a.url))
    await clients[0].register(SPECS)
    await clients[1].register(SPECS)
    const first = await Promise.all(clients.slice(0, 2).map(async (c, i) => await c.step(values(i), { timeout: 30 })))
    assert.ok(first.every(r => r.averaged), first.map(r => r.error).join('; '))

    // Agent 2's first averager fails when its tensors are taken to load the swarm's state into.
    const ctx = swarm.agents[2].ctx
    assert.ok(ctx !== undefined)
    const create = ctx.createAverager.bind(ctx)
    let failed = false
    ctx.createAverager = async (tensors, hooks) => {
      const averager = await create(tensors, hooks)
      if (!failed) {
        failed = true
        averager.withTensors = async () => { throw new Error('injected: loading the state failed') }
      }
      return averager
    }
    await assert.rejects(clients[2].register(SPECS), (err: SidecarError) => err.status === 500 && /injected/.test(err.message))
    assert.ok(swarm.agents[2].node.getProtocols().includes(RENDEZVOUS_PROTOCOL), 'the agent still serves the rendezvous')

    assert.deepEqual(await clients[2].register(SPECS), { created: true })
    assert.equal((await clients[2].state()).origin, 'peers', 'the retry downloaded the swarm state')
    const second = await Promise.all([clients[0], clients[2]].map(async (c, i) => await c.step(values(i * 2), { timeout: 30 })))
    assert.ok(second.every(r => r.averaged), second.map(r => r.error).join('; '))
  } finally {
    await swarm.stop()
  }
})
