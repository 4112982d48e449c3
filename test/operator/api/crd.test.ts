import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { parse } from 'yaml'
import { CRD_FILE, renderCrdYaml } from '../../../api/v1alpha1/crd-yaml.js'
import { swarmSchema, DURATION_PATTERN, MULTIADDR_PATTERN } from '../../../api/v1alpha1/schema.js'
import type { Schema } from '../../../api/v1alpha1/schema-builders.js'
import { validateSwarm } from '../../../api/v1alpha1/validate.js'
import { KEY_RULES, NAME_RULE, RESOURCE_RULES, SWARM_RULES, TOLERATION_RULES } from '../../../api/v1alpha1/spec-rules.js'
import { EXPOSE_RULES } from '../../../api/v1alpha1/expose-schema.js'
import { SPEC_RULES } from '../../../api/checkpoint-parameters.js'
import { RELAY_RULES } from '../../../api/relay-parameters.js'
import { AVERAGING_KEYS, AVERAGING_PARAMETERS, AVERAGING_RULES } from '../../../api/averaging-parameters.js'
import { MALFORMED, malformedSwarm } from '../malformed/cases.js'

test('the committed CRD YAML is exactly what npm run generate:crd writes', () => {
  const committed = readFileSync(CRD_FILE, 'utf8')
  assert.equal(committed, renderCrdYaml(), `${CRD_FILE} is stale: run npm run generate:crd and commit it`)
})

function walk (s: Schema, path: string, visit: (s: Schema, path: string) => void): void {
  visit(s, path)
  for (const [k, v] of Object.entries(s.properties ?? {})) walk(v, `${path}.${k}`, visit)
  if (s.items !== undefined) walk(s.items, `${path}[]`, visit)
}

test('every field of the schema has a description, so kubectl explain teaches it', () => {
  const missing: string[] = []
  walk(swarmSchema, '', (s, path) => { if (!(s.description ?? '').trim() && path !== '.metadata') missing.push(path) })
  assert.deepEqual(missing, [])
})

test('every string field is bounded, so CEL rules stay within the cost budget', () => {
  const unbounded: string[] = []
  walk(swarmSchema, '', (s, path) => { if (s.type === 'string' && s.enum === undefined && s.maxLength === undefined) unbounded.push(path) })
  assert.deepEqual(unbounded, [])
})

test('the CRD has status and scale subresources, short name avs and the printer columns', () => {
  const crd = parse(readFileSync(CRD_FILE, 'utf8'))
  const v = crd.spec.versions[0]
  assert.deepEqual(v.subresources.scale, { specReplicasPath: '.spec.replicas', statusReplicasPath: '.status.replicas', labelSelectorPath: '.status.selector' })
  assert.deepEqual(v.subresources.status, {})
  assert.deepEqual(crd.spec.names.shortNames, ['avs'])
  assert.ok(crd.spec.names.categories.includes('averaging'))
  const cols = v.additionalPrinterColumns.filter((c: { priority?: number }) => c.priority === undefined).map((c: { name: string }) => c.name)
  assert.deepEqual(cols, ['Desired', 'Ready', 'Rounds', 'Checkpoint', 'Phase', 'Age'])
  const wide = v.additionalPrinterColumns.find((c: { name: string }) => c.name === 'Completed')
  assert.deepEqual(wide, { name: 'Completed', type: 'date', jsonPath: '.status.completionTime', description: 'When the swarm became Complete.', priority: 1 })
  assert.deepEqual(v.additionalPrinterColumns.find((c: { name: string }) => c.name === 'Failed'), { name: 'Failed', type: 'date', jsonPath: '.status.failureTime', description: 'When the swarm became Failed (spec.backoffLimit exceeded).', priority: 1 })
  assert.equal(crd.metadata.name, 'averagingswarms.averaging.swarm.io')
})

test('CEL rules name the field they reject', () => {
  const rules: Array<{ path: string, fieldPath?: string, message: string }> = []
  walk(swarmSchema, '', (s, path) => { for (const r of s['x-kubernetes-validations'] ?? []) rules.push({ path, fieldPath: r.fieldPath, message: r.message }) })
  assert.ok(rules.length >= 8, `only ${rules.length} CEL rules`)
  // The root rule cannot point into metadata (the schema declares no fields there): its message names the field.
  for (const r of rules) assert.ok(r.fieldPath?.startsWith('.') || (r.path === '' && r.message.startsWith('metadata.name ')), `rule at ${r.path} names no field`)
})

test('every CEL rule of the CRD has a JavaScript twin the local validator runs', () => {
  const rules = new Map<string, string[]>()
  walk(swarmSchema, '', (s, path) => { for (const r of s['x-kubernetes-validations'] ?? []) rules.set(path, [...(rules.get(path) ?? []), r.rule]) })
  assert.deepEqual([...rules.keys()].sort(), ['', '.spec', '.spec.averaging'])
  assert.deepEqual(rules.get(''), [NAME_RULE.cel])
  assert.deepEqual(new Set(rules.get('.spec')), new Set([...SPEC_RULES, ...EXPOSE_RULES, ...RELAY_RULES, ...SWARM_RULES, ...KEY_RULES, ...RESOURCE_RULES, ...TOLERATION_RULES].map(r => r.cel)))
  // The averaging section's: a range per duration row (validate.ts checks each with the row's bound) and the table's rules.
  const averaging = rules.get('.spec.averaging')!
  const durations = AVERAGING_KEYS.filter(k => AVERAGING_PARAMETERS[k].bound.kind === 'duration')
  assert.equal(averaging.length, durations.length + AVERAGING_RULES.length)
  for (const k of durations) assert.ok(averaging.some(r => r.startsWith(`!has(self.${k}) ||`)), k)
  for (const r of AVERAGING_RULES) assert.ok(averaging.includes(r.cel), r.field)
})

test('the local validator refuses every malformed swarm, naming the field as the API server does', () => {
  for (const [i, c] of MALFORMED.entries()) {
    const problems = validateSwarm(malformedSwarm(c, i))
    // A missing field is named by its parent and its own name: 'spec.checkpoint is missing the field "volume"'.
    const parent = c.field.slice(0, c.field.lastIndexOf('.'))
    const names = (p: string): boolean => p.startsWith(c.field) || p === `${parent} is missing the field "${c.field.slice(parent.length + 1)}"`
    assert.ok(problems.some(names), `${c.what}: ${JSON.stringify(problems)}`)
  }
})

test('the duration pattern accepts Go durations and rejects bare numbers', () => {
  const re = new RegExp(DURATION_PATTERN)
  for (const ok of ['15s', '500ms', '1m30s', '1.5h', '100us']) assert.match(ok, re)
  for (const bad of ['15', 's', '1 m', '-1s', '1d', '']) assert.doesNotMatch(bad, re)
})

test('the multiaddr pattern accepts dns4 and ip4 TCP addresses with a peer id and rejects others', () => {
  const re = new RegExp(MULTIADDR_PATTERN)
  const id = '12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA'
  assert.match(`/dns4/avs-0.example.com/tcp/31337/p2p/${id}`, re)
  assert.match(`/ip4/10.0.0.1/tcp/4001/p2p/${id}`, re)
  assert.doesNotMatch(`/ip4/10.0.0.1/tcp/4001`, re)
  assert.doesNotMatch(`dns4/x/tcp/1/p2p/${id}`, re)
  assert.doesNotMatch(`/dns4/x/udp/1/p2p/${id}`, re)
})
