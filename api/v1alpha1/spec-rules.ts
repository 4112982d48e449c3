/**
 * The CRD's CEL rules between the spec's own sections (bootstrap, workload, ports) and on the
 * swarm's name, each with its JavaScript twin: the API server evaluates `cel` on the object it has
 * defaulted, the local validator (validate.ts: `npm start`, the operator's tests) calls `holds` on
 * the spec as written, so a field left out counts with its default. Every CEL rule of the CRD has
 * such a twin (test/operator/api/crd.test.ts), so a swarm `npm start` admits is one the API server
 * admits too.
 */
import type { SpecRule } from '../checkpoint-parameters.js'
import { DEFAULTS } from './defaults.js'
import type { CelRule } from './schema-builders.js'

/** Longest swarm name whose derived object names all stay valid. */
export const MAX_NAME_LENGTH = 39

type Obj = Record<string, unknown>
const section = (o: unknown, k: string): Obj => {
  const v = o !== null && typeof o === 'object' ? (o as Obj)[k] : undefined
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? v as Obj : {}
}
/**
 * A number field as the API server would see it after defaulting; NaN when it is not a number,
 * which the OpenAPI schema reports: the twin then holds, so it adds no second error.
 */
const defaulted = (v: unknown, dflt: number): number => v === undefined ? dflt : typeof v === 'number' ? v : NaN
const holdsUnlessNaN = (values: number[], test: () => boolean): boolean => values.some(Number.isNaN) || test()

const ports = (s: Obj): { p2p: number, metrics: number, sidecar: number } => ({
  p2p: defaulted(section(s, 'network').port, DEFAULTS.p2pPort),
  metrics: defaulted(section(s, 'metrics').port, DEFAULTS.metricsPort),
  sidecar: defaulted(section(s, 'workload').sidecarPort, DEFAULTS.sidecarPort)
})

export const SWARM_RULES: readonly SpecRule[] = [
  {
    field: 'bootstrap.replicas',
    message: 'a swarm needs at least one bootstrap agent or one entry in bootstrap.peers',
    cel: 'self.bootstrap.replicas > 0 || size(self.bootstrap.peers) > 0',
    holds: s => {
      const b = section(s, 'bootstrap')
      const replicas = defaulted(b.replicas, DEFAULTS.bootstrapReplicas)
      return holdsUnlessNaN([replicas], () => replicas > 0 || (Array.isArray(b.peers) && b.peers.length > 0))
    }
  },
  {
    field: 'bootstrap.replicas',
    message: 'bootstrap.replicas must not exceed replicas',
    cel: 'self.replicas == 0 || self.bootstrap.replicas <= self.replicas',
    holds: s => {
      const replicas = defaulted(s.replicas, DEFAULTS.replicas)
      const bootstrap = defaulted(section(s, 'bootstrap').replicas, DEFAULTS.bootstrapReplicas)
      return holdsUnlessNaN([replicas, bootstrap], () => replicas === 0 || bootstrap <= replicas)
    }
  },
  {
    field: 'workload.trainer',
    message: 'workload.trainer is required when workload.type is sidecar',
    cel: "self.workload.type != 'sidecar' || has(self.workload.trainer)",
    holds: s => {
      const w = section(s, 'workload')
      return w.type !== 'sidecar' || w.trainer !== undefined
    }
  },
  {
    field: 'metrics.port',
    message: 'metrics.port must differ from network.port',
    cel: 'self.network.port != self.metrics.port',
    holds: s => {
      const { p2p, metrics } = ports(s)
      return holdsUnlessNaN([p2p, metrics], () => p2p !== metrics)
    }
  },
  {
    field: 'workload.sidecarPort',
    message: 'workload.sidecarPort must differ from network.port and metrics.port',
    cel: 'self.workload.sidecarPort != self.metrics.port && self.workload.sidecarPort != self.network.port',
    holds: s => {
      const { p2p, metrics, sidecar } = ports(s)
      return holdsUnlessNaN([p2p, metrics, sidecar], () => sidecar !== metrics && sidecar !== p2p)
    }
  }
]

export const swarmRules = (): CelRule[] => SWARM_RULES.map(r => ({ rule: r.cel, message: r.message, fieldPath: `.${r.field}` }))

/** On the whole object (the name is in metadata): the longest derived name, <name>-bootstrap-15, must leave room for the StatefulSet's controller-revision-hash label (63 characters in all). */
export const NAME_RULE = {
  field: 'metadata.name',
  message: `metadata.name must be at most ${MAX_NAME_LENGTH} characters: agent, StatefulSet and DNS names are built from it`,
  cel: 'size(self.metadata.name) <= ' + String(MAX_NAME_LENGTH),
  holds: (o: unknown): boolean => {
    const name = section(o, 'metadata').name
    return typeof name !== 'string' || name.length <= MAX_NAME_LENGTH
  }
}
