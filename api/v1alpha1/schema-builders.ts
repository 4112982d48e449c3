/**
 * Small constructors for OpenAPI v3 (structural) schema nodes, so schema.ts reads like the API
 * it describes. Every constructor takes the description first: `kubectl explain` shows it, and
 * the schema test fails on any field without one.
 */

export interface CelRule {
  rule: string
  message: string
  fieldPath?: string
  reason?: 'FieldValueInvalid' | 'FieldValueForbidden' | 'FieldValueRequired' | 'FieldValueDuplicate'
}

export interface Schema {
  type?: 'object' | 'array' | 'string' | 'integer' | 'number' | 'boolean'
  description?: string
  properties?: Record<string, Schema>
  additionalProperties?: Schema
  items?: Schema
  required?: string[]
  default?: unknown
  enum?: readonly unknown[]
  pattern?: string
  format?: string
  minimum?: number
  maximum?: number
  exclusiveMinimum?: boolean
  minLength?: number
  maxLength?: number
  minItems?: number
  maxItems?: number
  maxProperties?: number
  anyOf?: Schema[]
  'x-kubernetes-int-or-string'?: boolean
  'x-kubernetes-preserve-unknown-fields'?: boolean
  'x-kubernetes-list-type'?: 'atomic' | 'set' | 'map'
  'x-kubernetes-list-map-keys'?: string[]
  'x-kubernetes-map-type'?: 'atomic' | 'granular'
  'x-kubernetes-validations'?: CelRule[]
}

type Extra = Omit<Schema, 'type' | 'description'>

export const str = (description: string, extra: Extra = {}): Schema =>
  ({ type: 'string', description, maxLength: extra.enum === undefined ? 253 : undefined, ...extra })

export const int = (description: string, extra: Extra = {}): Schema =>
  ({ type: 'integer', description, ...extra })

export const num = (description: string, extra: Extra = {}): Schema =>
  ({ type: 'number', description, ...extra })

export const bool = (description: string, extra: Extra = {}): Schema =>
  ({ type: 'boolean', description, ...extra })

export const obj = (description: string, properties: Record<string, Schema>, extra: Extra = {}): Schema =>
  ({ type: 'object', description, properties, ...extra })

export const arr = (description: string, items: Schema, extra: Extra = {}): Schema =>
  ({ type: 'array', description, items, ...extra })

/** A string-to-string map (annotations); its keys are checked by spec-rules.ts. */
export const stringMap = (description: string, extra: Extra = {}): Schema =>
  ({ type: 'object', description, additionalProperties: { type: 'string', maxLength: 4096 }, maxProperties: 64, ...extra })

/** A label value: up to 63 letters, digits, "-", "_" and ".", beginning and ending with a letter or digit, or empty. */
export const LABEL_VALUE = '^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$'

/** Labels or a node selector: label values here, label keys by spec-rules.ts (CEL alone sees a map's keys). */
export const labelMap = (description: string): Schema =>
  ({ type: 'object', description, additionalProperties: { type: 'string', maxLength: 63, pattern: LABEL_VALUE }, maxProperties: 64 })

/** An object the API server keeps verbatim (a Kubernetes core type the operator only copies). */
export const opaque = (description: string, extra: Extra = {}): Schema =>
  ({ type: 'object', description, 'x-kubernetes-preserve-unknown-fields': true, ...extra })

/**
 * Resource quantities ("1", "500m", "2Gi") keyed by resource name. Kubernetes' quantity syntax
 * without the minus sign: a negative request or limit is refused here, not when a pod is created.
 */
const quantityMap = (description: string): Schema => ({
  type: 'object',
  description,
  maxProperties: 16,
  additionalProperties: {
    anyOf: [{ type: 'integer' }, { type: 'string' }],
    maxLength: 64,
    minimum: 0,
    // Kubernetes' own OpenAPI pattern admits a fractional exponent ("1e-.3") that its parser refuses.
    pattern: '^\\+?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?[0-9]+))?$',
    'x-kubernetes-int-or-string': true
  }
})

export const resourceRequirements = (description: string): Schema => obj(description, {
  limits: quantityMap('Maximum amount of each resource a container may use, e.g. {"nvidia.com/gpu": 1, "memory": "8Gi"}.'),
  requests: quantityMap('Amount of each resource the scheduler reserves for a container; defaults to limits.')
})

/** Removes keys whose value is undefined, so the generated YAML has no `null`s. */
export function prune<T> (value: T): T {
  if (Array.isArray(value)) return value.map(prune) as T
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined).map(([k, v]) => [k, prune(v)])) as T
  }
  return value
}
