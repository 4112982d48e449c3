import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync, readdirSync } from 'node:fs'
import { parseAllDocuments } from 'yaml'
import { Ajv } from 'ajv'
import { swarmSchema } from '../../../api/v1alpha1/schema.js'
import { toJsonSchema } from '../../../api/v1alpha1/validate.js'
import { MALFORMED, malformedSwarm } from './cases.js'

const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false })
const validate = ajv.compile(toJsonSchema(swarmSchema))

function errorPaths (): string[] {
  return (validate.errors ?? []).map(e => {
    const base = e.instancePath.slice(1).split('/').map(p => /^\d+$/.test(p) ? `[${p}]` : `.${p}`).join('').replace(/^\./, '').replaceAll('.[', '[')
    return e.keyword === 'required' ? `${base}.${(e.params as { missingProperty: string }).missingProperty}` : base
  })
}

test('every example passes the CRD schema (no unknown or mistyped field)', () => {
  const files = readdirSync('examples').filter(f => f.endsWith('.yaml'))
  assert.ok(files.length >= 2)
  for (const f of files) {
    for (const doc of parseAllDocuments(readFileSync(`examples/${f}`, 'utf8'))) {
      const obj = doc.toJS()
      if (obj?.kind !== 'AveragingSwarm') continue
      assert.ok(validate(obj), `${f}: ${JSON.stringify(validate.errors)}`)
    }
  }
})

test('the malformed corpus has at least 15 cases, each rejected for its own field by the OpenAPI schema or left to CEL', () => {
  assert.ok(MALFORMED.length >= 15)
  for (const [i, c] of MALFORMED.entries()) {
    const ok = validate(malformedSwarm(c, i))
    if (c.cel === true) { assert.ok(ok, `${c.what}: only the CEL rule should reject it, but ${JSON.stringify(errorPaths())}`); continue }
    assert.ok(!ok, `${c.what} was accepted`)
    assert.ok(errorPaths().some(p => p.startsWith(c.field)), `${c.what}: errors ${JSON.stringify(errorPaths())} do not name ${c.field}`)
  }
})
