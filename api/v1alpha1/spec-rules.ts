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

/**
 * A Kubernetes qualified name: label and annotation keys, resource names. An optional prefix (a DNS
 * subdomain of at most 253 characters) and "/", then a name of at most 63 letters, digits, "-", "_"
 * and ".", beginning and ending with a letter or digit. (A dot is "[.]": CEL's string literals have no "\\." escape.)
 */
export const QUALIFIED_NAME = '^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'
const qualified = new RegExp(QUALIFIED_NAME)
export const isQualifiedName = (k: string): boolean => k.length <= 317 && qualified.test(k) && (!k.includes('/') || k.indexOf('/') <= 253)

/**
 * The maps whose keys the pods carry as label keys, annotation keys or resource names: a key the
 * API server would refuse on the StatefulSet is refused on the swarm, naming the map. Only CEL sees
 * a map's keys (OpenAPI checks its values).
 */
const KEYED_MAPS: ReadonlyArray<{ path: string[], keys: string }> = [
  { path: ['nodeSelector'], keys: 'label keys' },
  { path: ['podTemplate', 'labels'], keys: 'label keys' },
  { path: ['podTemplate', 'annotations'], keys: 'annotation keys' },
  { path: ['network', 'expose', 'service', 'annotations'], keys: 'annotation keys' },
  ...[[], ['auxiliary'], ['workload', 'trainer']].flatMap(at => ['limits', 'requests'].map(k => ({ path: [...at, 'resources', k], keys: 'resource names' })))
]

const keyRule = ({ path, keys }: { path: string[], keys: string }): SpecRule => {
  const field = path.join('.')
  const absent = path.map((_, i) => `!has(self.${path.slice(0, i + 1).join('.')})`).join(' || ')
  return {
    field,
    message: `${field} must have ${keys} for keys: an optional DNS subdomain and "/", then at most 63 letters, digits, "-", "_" or ".", beginning and ending with a letter or digit`,
    cel: `${absent} || self.${field}.all(k, size(k) <= 317 && k.matches('${QUALIFIED_NAME}') && (!k.contains('/') || k.indexOf('/') <= 253))`,
    holds: s => {
      let v: unknown = s
      for (const k of path) v = v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Obj)[k] : undefined
      return v === null || typeof v !== 'object' || Array.isArray(v) || Object.keys(v).every(isQualifiedName)
    }
  }
}

export const KEY_RULES: readonly SpecRule[] = KEYED_MAPS.map(keyRule)

export const swarmRules = (): CelRule[] => [...SWARM_RULES, ...KEY_RULES].map(r => ({ rule: r.cel, message: r.message, fieldPath: `.${r.field}` }))

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
