/**
 * spec.network.relay and spec.network.reachability: circuit relays for the swarm's
 * members behind NAT, from api/relay-parameters.ts. Absent: bootstrap agents relay with the defaults.
 */
import { DEFAULT_REACHABILITY, DEFAULT_RELAY_CIRCUIT_DURATION, DEFAULT_RELAY_SERVE, REACHABILITIES, RELAY_CIRCUIT_DURATION, RELAY_CIRCUIT_MIB, RELAY_MAX_RESERVATIONS, RELAY_RULES, RELAY_SERVE } from '../relay-parameters.js'
import { DURATION_PATTERN, formatRange } from '../parameter-bounds.js'
import { int, obj, str, type CelRule, type Schema } from './schema-builders.js'

export const relay: Schema = obj('Circuit relays (libp2p circuit relay v2) through which members behind NAT are reached. Only members relay and are relayed: peers holding the private-network key and, with an allow list, on it; never outsiders. Absent: bootstrap agents relay, with the defaults below.', {
  serve: str('Which agents run a relay: Bootstrap (the bootstrap agents), All (bootstrap and regular agents) or None.', { enum: RELAY_SERVE, default: DEFAULT_RELAY_SERVE }),
  maxReservations: int(`Relay slots one relay holds at once, ${RELAY_MAX_RESERVATIONS.min} to ${RELAY_MAX_RESERVATIONS.max}; a member refused a slot that stays unreachable averages as a client.`, { minimum: RELAY_MAX_RESERVATIONS.min, maximum: RELAY_MAX_RESERVATIONS.max, default: RELAY_MAX_RESERVATIONS.default }),
  circuitMiB: int(`MiB one relayed connection may carry (both directions) before the relay closes it and the peers dial again, ${RELAY_CIRCUIT_MIB.min} to ${RELAY_CIRCUIT_MIB.max}.`, { minimum: RELAY_CIRCUIT_MIB.min, maximum: RELAY_CIRCUIT_MIB.max, default: RELAY_CIRCUIT_MIB.default }),
  circuitDuration: str(`Longest life of one relayed connection (Go duration, ${formatRange(RELAY_CIRCUIT_DURATION)}).`, { pattern: DURATION_PATTERN, maxLength: 32, default: DEFAULT_RELAY_CIRCUIT_DURATION })
})

export const reachability: Schema = str('How an agent learns whether it can be dialled: auto (compares the address peers observe it at with its own; an exposed agent is public), public, or private (behind NAT: it reserves a relay slot and announces its relayed address; without one it averages as a client).', { enum: REACHABILITIES, default: DEFAULT_REACHABILITY })

export const relayRules = (): CelRule[] => RELAY_RULES.map(r => ({ rule: r.cel, message: r.message, fieldPath: `.${r.field}` }))
