/**
 * spec.network.relay and .reachability in the built pods: bootstrap agents relay by
 * default, regular ones too with serve All, auxiliary agents never; the limits go to the agent as
 * its AVS_RELAY_* variables, within bounds the agent accepts; reachability auto is left out.
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { AveragingSwarm } from '../../../api/v1alpha1/types.js'
import { loadAgentConfig } from '../../../agent/config.js'
import { RELAY_CIRCUIT_MIB, RELAY_MAX_RESERVATIONS } from '../../../api/relay-parameters.js'
import { desiredFor, swarm } from './fixture.js'

const sets = async (s: AveragingSwarm) => (await desiredFor(s)).objects.filter(o => o.kind === 'StatefulSet') as any[]
const agentEnvOf = (set: any): Record<string, string | undefined> =>
  Object.fromEntries(set.spec.template.spec.containers.find((c: any) => c.name === 'agent').env.map((e: any) => [e.name, e.value]))
const byRole = async (s: AveragingSwarm): Promise<Record<string, Record<string, string | undefined>>> =>
  Object.fromEntries((await sets(s)).map(o => [o.metadata.name, agentEnvOf(o)]))

test('without spec.network.relay the bootstrap agents relay with the agent\'s defaults; regular and auxiliary agents do not', async () => {
  const env = await byRole(swarm({ auxiliary: { replicas: 1 } }))
  assert.equal(env['demo-bootstrap-0'].AVS_RELAY, 'serve')
  assert.equal(env['demo-bootstrap-0'].AVS_RELAY_MAX_RESERVATIONS, undefined, 'the agent\'s own defaults')
  assert.equal(env['demo-agent'].AVS_RELAY, undefined)
  assert.equal(env['demo-aux'].AVS_RELAY, undefined)
  for (const e of Object.values(env)) assert.equal(e.AVS_REACHABILITY, undefined, 'auto is the agent\'s default')
})

test('serve All with limits and reachability private: every bootstrap and regular agent relays with them, auxiliary ones never, and the agent accepts the edges', async () => {
  for (const [maxReservations, circuitMiB, circuitDuration] of [[RELAY_MAX_RESERVATIONS.min, RELAY_CIRCUIT_MIB.min, '1s'], [RELAY_MAX_RESERVATIONS.max, RELAY_CIRCUIT_MIB.max, '24h']] as const) {
    const env = await byRole(swarm({ auxiliary: { replicas: 1 }, network: { relay: { serve: 'All', maxReservations, circuitMiB, circuitDuration }, reachability: 'private' } }))
    for (const name of ['demo-bootstrap-0', 'demo-agent']) {
      assert.equal(env[name].AVS_RELAY, 'serve', name)
      assert.equal(env[name].AVS_RELAY_MAX_RESERVATIONS, String(maxReservations))
      assert.equal(env[name].AVS_RELAY_CIRCUIT_MIB, String(circuitMiB))
      assert.equal(env[name].AVS_RELAY_CIRCUIT_DURATION, circuitDuration)
      assert.equal(env[name].AVS_REACHABILITY, 'private')
      const config = loadAgentConfig({ AVS_SWARM: 'demo', AVS_POD_NAME: `${name}-0`, AVS_PREFIX: 'default_demo', ...Object.fromEntries(Object.entries(env[name]).filter(([, v]) => v !== undefined)) as Record<string, string> })
      assert.deepEqual(config.relay, { maxReservations, circuitBytes: circuitMiB * 2 ** 20, circuitDurationMs: circuitDuration === '1s' ? 1000 : 86_400_000 })
      assert.equal(config.reachability, 'private')
    }
    assert.equal(env['demo-aux'].AVS_RELAY, undefined)
  }
  const none = await byRole(swarm({ network: { relay: { serve: 'None' } } }))
  for (const e of Object.values(none)) assert.equal(e.AVS_RELAY, undefined)
})
