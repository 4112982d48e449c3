import { Ajv } from 'ajv'
import { swarmSchema } from './schema.js'
import type { Schema } from './schema-builders.js'

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

/** Problems with a swarm object, each one sentence naming the field; empty when valid. */
export function validateSwarm (obj: unknown): string[] {
  compiled ??= new Ajv({ strict: false, allErrors: true, validateFormats: false }).compile(toJsonSchema(swarmSchema))
  if (compiled(obj)) return []
  return (compiled.errors ?? []).map(e => {
    const path = e.instancePath.slice(1).split('/').filter(p => p !== '').map(p => /^\d+$/.test(p) ? `[${p}]` : `.${p}`).join('').replace(/^\./, '')
    if (e.keyword === 'additionalProperties') return `${path === '' ? 'the object' : path} has an unknown field "${(e.params as { additionalProperty: string }).additionalProperty}"`
    if (e.keyword === 'required') return `${path === '' ? 'the object' : path} is missing the field "${(e.params as { missingProperty: string }).missingProperty}"`
    return `${path === '' ? 'the object' : path} ${e.message ?? 'is invalid'}`
  })
}
