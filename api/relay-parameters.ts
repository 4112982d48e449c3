/**
 * Bounds and defaults of spec.network.relay and spec.network.reachability: the CRD
 * schema (api/v1alpha1/relay-schema.ts), the operator's pod builder and the agent's parser
 * (agent/config.ts) all take them from here, so every value the API server admits the agent runs.
 */
import { AGENT_ENV } from './agent-env.js'
import type { Bound } from './parameter-bounds.js'
import { durationRule, type SpecRule } from './checkpoint-parameters.js'

/** Which agents serve as relays for the swarm's members: bootstrap agents (the default), all bootstrap and regular agents, or none. */
export const RELAY_SERVE = ['Bootstrap', 'All', 'None'] as const
export type RelayServe = (typeof RELAY_SERVE)[number]
export const DEFAULT_RELAY_SERVE: RelayServe = 'Bootstrap'

export const RELAY_MAX_RESERVATIONS = { env: AGENT_ENV.relayMaxReservations.name, min: 1, max: 4096, default: Number(AGENT_ENV.relayMaxReservations.default) } as const
export const RELAY_CIRCUIT_MIB = { env: AGENT_ENV.relayCircuitMiB.name, min: 1, max: 1_048_576, default: Number(AGENT_ENV.relayCircuitMiB.default) } as const
export const RELAY_CIRCUIT_DURATION: Bound & { kind: 'duration' } = { kind: 'duration', min: '1s', max: '24h' }
export const DEFAULT_RELAY_CIRCUIT_DURATION = AGENT_ENV.relayCircuitDuration.default

/** How an agent decides whether it can be dialled (AVS_REACHABILITY). */
export const REACHABILITIES = ['auto', 'public', 'private'] as const
export type ReachabilitySetting = (typeof REACHABILITIES)[number]
export const DEFAULT_REACHABILITY: ReachabilitySetting = 'auto'

export const RELAY_RULES: readonly SpecRule[] = [durationRule(['network', 'relay', 'circuitDuration'], RELAY_CIRCUIT_DURATION)]
