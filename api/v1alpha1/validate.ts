import { Ajv } from 'ajv'
import { swarmSchema } from './schema.js'
import type { Schema } from './schema-builders.js'
import { AVERAGING_KEYS, AVERAGING_PARAMETERS, AVERAGING_RULES } from '../averaging-parameters.js'
import { checkValue, DURATION_PATTERN as DURATION_RE } from '../parameter-bounds.js'
import { DEFAULT_AVERAGING } from './defaults.js'
import { SPEC_RULES } from '../checkpoint-parameters.js'
import { EXPOSE_RULES } from './expose-schema.js'
import { RELAY_RULES } from '../relay-parameters.js'
import { KEY_RULES, NAME_RULE, RESOURCE_RULES, SWARM_RULES, TOLERATION_RULES } from './spec-rules.js'

/**
 * The CRD's OpenAPI schema as plain JSON Schema, so the same schema that the API server
 * enforces validates a swarm outside a cluster (the local runtime). Objects without
 * x-kubernetes-preserve-unknown-fields reject unknown fields, as the API server's pruning
 * with strict field validation does.
 */
export function toJsonSchema (s: Schema): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(s)) {
    if (k.startsWith('x-kubernetes-') || k === 'default' || k === 'description') continue
    if (k === 'properties') out[k] = Object.fromEntries(Object.entries(v as Record<string, Schema>).map(([p, ps]) => [p, toJsonSchema(ps)]))
    else if (k === 'items' || k === 'additionalProperties') out[k] = toJsonSchema(v as Schema)
    else if (k === 'anyOf') out[k] = (v as Schema[]).map(toJsonSchema)
    else if (k === 'exclusiveMinimum') { if (v === true) { out.exclusiveMinimum = s.minimum; delete out.minimum } }
    else if (k === 'minimum' && s.exclusiveMinimum === true) continue
    else out[k] = v
  }
  if (s.type === 'object' && s.properties !== undefined && s['x-kubernetes-preserve-unknown-fields'] !== true) out.additionalProperties = false
  return out
}

let compiled: ReturnType<Ajv['compile']> | null = null

/**
 * The CRD's CEL rules on the averaging section, evaluated by their JavaScript twins from the
 * parameter table (duration ranges, minGroupSize <= targetGroupSize, requestTimeout below
 * averagingExpiration), on the section as the API server's defaulting completes it. The CRD's
 * other CEL rules have twins too (specRuleProblems, and the name's in validateSwarm).
 */
export function averagingRuleProblems (averaging: unknown): string[] {
  if (averaging === null || typeof averaging !== 'object') return []
  const a: Record<string, unknown> = { ...DEFAULT_AVERAGING, ...averaging }
  const bad = new Set(AVERAGING_KEYS.filter(k => a[k] !== undefined && checkValue(AVERAGING_PARAMETERS[k].bound, a[k]) !== undefined))
  const out: string[] = []
  for (const k of AVERAGING_KEYS) {
    const b = AVERAGING_PARAMETERS[k].bound
    // Types, patterns and numeric ranges are the OpenAPI schema's to report; durations' ranges are CEL's.
    if (b.kind === 'duration' && bad.has(k) && typeof a[k] === 'string' && new RegExp(DURATION_RE).test(a[k])) out.push(`spec.averaging.${k} ${checkValue(b, a[k])}`)
  }
  for (const r of AVERAGING_RULES) {
    const fields = AVERAGING_KEYS.filter(k => r.cel.includes(`self.${k}`))
    if (fields.some(k => bad.has(k) || a[k] === undefined)) continue
    if (!r.holds(a)) out.push(`spec.averaging.${r.field}: ${r.message}`)
  }
  return out
}

/** The CRD's CEL rules between spec fields (checkpoint's store, restoreFrom, completion, ttlSecondsAfterFinished, ports, bootstrap counts), by their JavaScript twins. */
export function specRuleProblems (spec: unknown): string[] {
  if (spec === null || typeof spec !== 'object') return []
  return [...SPEC_RULES, ...EXPOSE_RULES, ...RELAY_RULES, ...SWARM_RULES, ...KEY_RULES, ...RESOURCE_RULES, ...TOLERATION_RULES].filter(r => !r.holds(spec as Record<string, unknown>)).map(r => `spec.${r.field}: ${r.message}`)
}

/** Problems with a swarm object, each one sentence naming the field; empty when valid. */
export function validateSwarm (obj: unknown): string[] {
  compiled ??= new Ajv({ strict: false, allErrors: true, validateFormats: false }).compile(toJsonSchema(swarmSchema))
  const spec = (obj as { spec?: { averaging?: unknown } } | null)?.spec
  const cel = [...averagingRuleProblems(spec?.averaging), ...specRuleProblems(spec), ...(NAME_RULE.holds(obj) ? [] : [NAME_RULE.message])]
  if (compiled(obj)) return cel
  return [...cel, ...(compiled.errors ?? []).map(e => {
    const path = e.instancePath.slice(1).split('/').filter(p => p !== '').map(p => /^\d+$/.test(p) ? `[${p}]` : `.${p}`).join('').replace(/^\./, '')
    if (e.keyword === 'additionalProperties') return `${path === '' ? 'the object' : path} has an unknown field "${(e.params as { additionalProperty: string }).additionalProperty}"`
    if (e.keyword === 'required') return `${path === '' ? 'the object' : path} is missing the field "${(e.params as { missingProperty: string }).missingProperty}"`
    return `${path === '' ? 'the object' : path} ${e.message ?? 'is invalid'}`
  })]
}
