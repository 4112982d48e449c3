import { test } from 'node:test'
import assert from 'node:assert/strict'
import { API_GROUP, API_VERSION } from '../../api/version.js'

test('api group and version are a valid Kubernetes apiVersion', () => {
  assert.match(`${API_GROUP}/${API_VERSION}`, /^[a-z0-9.-]+\/v\d+(alpha|beta)?\d*$/)
})
