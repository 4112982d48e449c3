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
import { compareQuantities, parseQuantity } from './quantity.js'

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
/** The value at a path of objects in input the validator has not checked (undefined where the path breaks). */
const valueAt = (o: unknown, path: readonly string[]): unknown => {
  let v = o
  for (const k of path) v = v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Obj)[k] : undefined
  return v
}
/** `!has(self.a) || !has(self.a.b) || …`: CEL's guard for an optional path. */
const absentCel = (path: readonly string[]): string => path.map((_, i) => `!has(self.${path.slice(0, i + 1).join('.')})`).join(' || ')
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
const KEYED_MAPS: ReadonlyArray<{ path: string[], keys: keyof typeof KEY_CEL }> = [
  { path: ['nodeSelector'], keys: 'label keys' },
  { path: ['podTemplate', 'labels'], keys: 'label keys' },
  { path: ['podTemplate', 'annotations'], keys: 'annotation keys' },
  { path: ['network', 'expose', 'service', 'annotations'], keys: 'annotation keys' },
  ...[[], ['auxiliary'], ['workload', 'trainer']].flatMap(at => ['limits', 'requests'].map(k => ({ path: [...at, 'resources', k], keys: 'resource names' as const })))
]

/**
 * A container's resource name: cpu, memory, ephemeral-storage, or an extended resource, a qualified
 * name with a domain outside kubernetes.io (nvidia.com/gpu). Not hugepages-<size>: a pod's rules for
 * them (a multiple of the page size, cpu or memory beside, limits equal to requests) are more than
 * these rules check, and neither agents nor trainers use them.
 */
const STANDARD_RESOURCES = ['cpu', 'memory', 'ephemeral-storage']
/** Extended resources (a "/" in the name) are not overcommitted: whole numbers, a request equal to its limit. */
const isExtended = (k: string): boolean => k.includes('/')
export const isResourceName = (k: string): boolean => STANDARD_RESOURCES.includes(k) ||
  (isQualifiedName(k) && isExtended(k) && !/(^|\.)kubernetes\.io$/.test(k.slice(0, k.indexOf('/'))))

const KEY_CEL = {
  'label keys': "size(k) <= 317 && k.matches('QN') && (!k.contains('/') || k.indexOf('/') <= 253)",
  'annotation keys': "size(k) <= 317 && k.matches('QN') && (!k.contains('/') || k.indexOf('/') <= 253)",
  'resource names': `k in ${JSON.stringify(STANDARD_RESOURCES).replaceAll('"', "'")} || ` +
    "(size(k) <= 317 && k.matches('QN') && k.contains('/') && k.indexOf('/') <= 253 && !k.substring(0, k.indexOf('/')).matches('(^|[.])kubernetes[.]io$'))"
} as const
const KEY_CHECK = { 'label keys': isQualifiedName, 'annotation keys': isQualifiedName, 'resource names': isResourceName } as const
const KEY_WORDS = {
  'label keys': 'an optional DNS subdomain and "/", then at most 63 letters, digits, "-", "_" or ".", beginning and ending with a letter or digit',
  'annotation keys': 'an optional DNS subdomain and "/", then at most 63 letters, digits, "-", "_" or ".", beginning and ending with a letter or digit',
  'resource names': 'cpu, memory, ephemeral-storage, or an extended resource: a domain outside kubernetes.io, "/" and a name (nvidia.com/gpu)'
} as const

const keyRule = ({ path, keys }: { path: string[], keys: keyof typeof KEY_CEL }): SpecRule => {
  const field = path.join('.')
  const absent = absentCel(path)
  return {
    field,
    message: `${field} must have ${keys} for keys: ${KEY_WORDS[keys]}`,
    cel: `${absent} || self.${field}.all(k, ${KEY_CEL[keys].replaceAll('QN', QUALIFIED_NAME)})`,
    holds: s => {
      const v = valueAt(s, path)
      return v === null || typeof v !== 'object' || Array.isArray(v) || Object.keys(v).every(KEY_CHECK[keys])
    }
  }
}

export const KEY_RULES: readonly SpecRule[] = KEYED_MAPS.map(keyRule)

const RESOURCE_SECTIONS: ReadonlyArray<readonly string[]> = [['resources'], ['auxiliary', 'resources'], ['workload', 'trainer', 'resources']]

const resourceRules = (at: readonly string[]): SpecRule[] => {
  const r = `self.${at.join('.')}`
  const field = at.join('.')
  const absent = absentCel(at)
  const q = (side: 'requests' | 'limits'): string => `quantity(string(${r}.${side}[k]))`
  const section = (s: Obj): { requests: Obj, limits: Obj } => {
    const v = valueAt(s, at)
    const part = (k: string): Obj => { const x = v !== null && typeof v === 'object' ? (v as Obj)[k] : undefined; return x !== null && typeof x === 'object' && !Array.isArray(x) ? x as Obj : {} }
    return { requests: part('requests'), limits: part('limits') }
  }
  // A value the schema refuses (not a quantity) or a name the key rule refuses is theirs to report.
  const known = (k: string, v: unknown): boolean => isResourceName(k) && parseQuantity(v) !== undefined
  // Extended resources are counted, not measured: a plain whole number (what pods take, without the
  // quantity forms whose integrality CEL and the pod's check judge differently at 20 digits).
  const WHOLE = '^(0|[1-9][0-9]{0,8})$'
  const whole = new RegExp(WHOLE)
  return [
    {
      field: `${field}.requests`,
      message: `${field}.requests must not exceed ${field}.limits for any resource`,
      cel: `${absent} || !has(${r}.requests) || !has(${r}.limits) || ${r}.requests.all(k, !(k in ${r}.limits) || !isQuantity(string(${r}.requests[k])) || !isQuantity(string(${r}.limits[k])) || ${q('requests')}.compareTo(${q('limits')}) <= 0)`,
      holds: s => {
        const { requests, limits } = section(s)
        return Object.entries(requests).every(([k, v]) => !(k in limits) || !known(k, v) || !known(k, limits[k]) || compareQuantities(parseQuantity(v)!, parseQuantity(limits[k])!) <= 0)
      }
    },
    ...(['limits', 'requests'] as const).map((side): SpecRule => ({
      field: `${field}.${side}`,
      message: `${field}.${side} of an extended resource (nvidia.com/gpu) must be a whole number from 0 to 999999999`,
      cel: `${absent} || !has(${r}.${side}) || ${r}.${side}.all(k, !k.contains('/') || string(${r}.${side}[k]).matches('${WHOLE}'))`,
      holds: s => Object.entries(section(s)[side]).every(([k, v]) => !isExtended(k) || whole.test(String(v)))
    })),
    {
      field: `${field}.requests`,
      message: `${field}.requests of an extended resource (nvidia.com/gpu) needs the same amount in ${field}.limits: such resources are not overcommitted`,
      cel: `${absent} || !has(${r}.requests) || ${r}.requests.all(k, !k.contains('/') || (has(${r}.limits) && k in ${r}.limits && string(${r}.requests[k]) == string(${r}.limits[k])))`,
      holds: s => {
        const { requests, limits } = section(s)
        return Object.entries(requests).every(([k, v]) => !isExtended(k) || (k in limits && String(v) === String(limits[k])))
      }
    }
  ]
}

/** Requests and limits as a pod takes them (a StatefulSet breaking one is refused). */
export const RESOURCE_RULES: readonly SpecRule[] = RESOURCE_SECTIONS.flatMap(resourceRules)

type Toleration = { key?: unknown, operator?: unknown, value?: unknown, effect?: unknown, tolerationSeconds?: unknown }
const tolerationsOf = (s: Obj): Toleration[] => Array.isArray(s.tolerations) ? s.tolerations.filter((t): t is Toleration => t !== null && typeof t === 'object') : []

/** The pod's rules between a toleration's or a variable's fields, and the containers the operator names (a StatefulSet breaking one is refused; the swarm is, now, naming the field). */
export const TOLERATION_RULES: readonly SpecRule[] = [
  {
    field: 'tolerations',
    message: 'tolerations with an empty key must have operator Exists (they match every taint)',
    cel: "!has(self.tolerations) || self.tolerations.all(t, (has(t.key) && t.key != '') || (has(t.operator) && t.operator == 'Exists'))",
    holds: s => tolerationsOf(s).every(t => (typeof t.key === 'string' && t.key !== '') || t.operator === 'Exists')
  },
  {
    field: 'tolerations',
    message: 'tolerations with operator Exists must have no value',
    cel: "!has(self.tolerations) || self.tolerations.all(t, !has(t.operator) || t.operator != 'Exists' || !has(t.value) || t.value == '')",
    holds: s => tolerationsOf(s).every(t => t.operator !== 'Exists' || t.value === undefined || t.value === '')
  },
  {
    field: 'tolerations',
    message: 'tolerations with tolerationSeconds must have effect NoExecute',
    cel: "!has(self.tolerations) || self.tolerations.all(t, !has(t.tolerationSeconds) || (has(t.effect) && t.effect == 'NoExecute'))",
    holds: s => tolerationsOf(s).every(t => t.tolerationSeconds === undefined || t.effect === 'NoExecute')
  },
  ...[['podTemplate', 'env'], ['workload', 'trainer', 'env']].map((path): SpecRule => {
    const field = path.join('.')
    const absent = absentCel(path)
    return {
      field,
      message: `${field} must not give a variable both value and valueFrom`,
      cel: `${absent} || self.${field}.all(e, !has(e.valueFrom) || !has(e.value) || e.value == '')`,
      holds: s => {
        const v = valueAt(s, path)
        return !Array.isArray(v) || v.every(e => e === null || typeof e !== 'object' || (e as Obj).valueFrom === undefined || (e as Obj).value === undefined || (e as Obj).value === '')
      }
    }
  }),
  {
    field: 'podTemplate.containers',
    message: 'podTemplate.containers must not be named agent or trainer: the operator runs those',
    cel: "!has(self.podTemplate) || !has(self.podTemplate.containers) || self.podTemplate.containers.all(c, c.name != 'agent' && c.name != 'trainer')",
    holds: s => {
      const c = section(s, 'podTemplate').containers
      return !Array.isArray(c) || c.every(x => x === null || typeof x !== 'object' || ((x as Obj).name !== 'agent' && (x as Obj).name !== 'trainer'))
    }
  }
]

export const swarmRules = (): CelRule[] => [...SWARM_RULES, ...KEY_RULES, ...RESOURCE_RULES, ...TOLERATION_RULES].map(r => ({ rule: r.cel, message: r.message, fieldPath: `.${r.field}` }))

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
