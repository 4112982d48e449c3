import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { parse } from 'yaml'
import { CRD_FILE, renderCrdYaml } from '../../../api/v1alpha1/crd-yaml.js'
import { swarmSchema, DURATION_PATTERN, MULTIADDR_PATTERN } from '../../../api/v1alpha1/schema.js'
import type { Schema } from '../../../api/v1alpha1/schema-builders.js'

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
