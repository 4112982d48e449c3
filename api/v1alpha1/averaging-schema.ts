/**
 * The CRD's averaging section, derived from the parameter table (api/averaging-parameters.ts):
 * one schema node per row, a CEL rule for each duration's range (OpenAPI cannot compare
 * durations) and the table's rules between fields.
 */
import { AVERAGING_KEYS, AVERAGING_PARAMETERS, AVERAGING_RULES, type AveragingKey, type AveragingParameter } from '../averaging-parameters.js'
import { DURATION_PATTERN, formatRange, type Bound } from '../parameter-bounds.js'
import { int, num, obj, str, type CelRule, type Schema } from './schema-builders.js'

function node (b: Bound, description: string, dflt: string | number | undefined): Schema {
  const d = dflt === undefined ? {} : { default: dflt }
  switch (b.kind) {
    case 'int': return int(description, { minimum: b.min, maximum: b.max, ...d })
    case 'number': return num(description, { minimum: b.min, ...(b.exclusiveMin === true ? { exclusiveMinimum: true } : {}), maximum: b.max, ...d })
    case 'duration': return str(description, { pattern: DURATION_PATTERN, maxLength: 32, ...d })
    case 'string': return str(description, { pattern: b.pattern, ...(b.minLength === undefined ? {} : { minLength: b.minLength }), maxLength: b.maxLength, ...d })
    case 'enum': return str(description, { enum: b.values, ...d })
  }
}

/** `duration(self.k)` within the row's range; a value the pattern already rejects is left to it. */
function durationRule (k: AveragingKey, b: Bound & { kind: 'duration' }): CelRule {
  return {
    rule: `!has(self.${k}) || !self.${k}.matches('${DURATION_PATTERN}') || (duration(self.${k}) >= duration('${b.min}') && duration(self.${k}) <= duration('${b.max}'))`,
    message: `${k} must be ${formatRange(b)}`,
    fieldPath: `.${k}`
  }
}

/** Defaults of the rows that have one, in the CRD's form. */
export function averagingDefaults (): Record<string, string | number> {
  const out: Record<string, string | number> = {}
  for (const k of AVERAGING_KEYS) { const p: AveragingParameter = AVERAGING_PARAMETERS[k]; if (p.default !== undefined) out[k] = p.default }
  return out
}

export function averagingSchema (): Schema {
  const properties: Record<string, Schema> = {}
  const rules: CelRule[] = []
  for (const k of AVERAGING_KEYS) {
    const p: AveragingParameter = AVERAGING_PARAMETERS[k]
    properties[k] = node(p.bound, p.description, p.default)
    if (p.bound.kind === 'duration') rules.push(durationRule(k, p.bound))
  }
  for (const r of AVERAGING_RULES) rules.push({ rule: r.cel, message: r.message, fieldPath: `.${r.field}` })
  return obj('Averaging parameters, with the meaning of hivemind\'s DecentralizedAverager.', properties, {
    // Object defaults are spelled out: the API server checks each default against the CEL rules.
    default: averagingDefaults(),
    'x-kubernetes-validations': rules
  })
}
