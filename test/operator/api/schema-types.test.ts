import { test } from 'node:test'
import assert from 'node:assert/strict'
import { swarmSchema, specSchema, statusSchema } from '../../../api/v1alpha1/schema.js'
import type { Schema } from '../../../api/v1alpha1/schema-builders.js'
import { withDefaults, DEFAULT_AVERAGING } from '../../../api/v1alpha1/defaults.js'
import type { AveragingSwarmSpec, AveragingSwarmStatus } from '../../../api/v1alpha1/types.js'

/** Every optional key made required, recursively: the compiler then demands an object that names
 * every field of the TypeScript types, and rejects any key they do not declare. */
type Complete<T> = T extends Array<infer U> ? Array<Complete<U>> : T extends object ? { [K in keyof T]-?: Complete<T[K]> } : T

const fullSpec: Complete<AveragingSwarmSpec> = {
  replicas: 8,
  image: 'agent:1',
  imagePullPolicy: 'IfNotPresent',
  resources: { limits: {}, requests: {} },
  nodeSelector: {},
  tolerations: [],
  affinity: {},
  podTemplate: { labels: {}, annotations: {}, env: [], containers: [], volumes: [], serviceAccountName: 'sa', priorityClassName: 'p', schedulerName: 's', imagePullSecrets: [], terminationGracePeriodSeconds: 30 },
  averaging: { prefix: 'p', targetGroupSize: 4, minGroupSize: 2, initialGroupBits: '', averagingExpiration: '15s', requestTimeout: '3s', allreduceTimeout: '60s', partSizeBytes: 65536, averagingAlpha: 1, compression: 'none', period: '30s', bandwidth: 1, dataThreads: 0 },
  bootstrap: { replicas: 2, peers: [] },
  auxiliary: { replicas: 0, resources: { limits: {}, requests: {} } },
  network: { port: 31337, privateNetworkSecret: { name: 's', key: 'k', generate: false }, expose: { type: 'LoadBalancer', dataPort: 31338, announceHost: 'h', service: { annotations: {}, loadBalancerClass: 'c', externalTrafficPolicy: 'Local' } }, relay: { serve: 'All', maxReservations: 8, circuitMiB: 1024, circuitDuration: '10m' }, reachability: 'private' },
  workload: { type: 'sidecar', sidecarPort: 9401, trainer: { image: 't', imagePullPolicy: 'Always', command: [], args: [], env: [], resources: { limits: {}, requests: {} } } },
  metrics: { port: 9400, podMonitor: true },
  logLevel: 'info',
  suspend: false,
  // A whole type, not an admissible spec: the CEL rules allow one of volume/s3 and of claimName/claimTemplate.
  checkpoint: {
    every: 100,
    keep: 3,
    interval: '30m',
    volume: { claimName: 'c', claimTemplate: { size: '10Gi', storageClassName: 'fast', accessModes: ['ReadWriteMany'] } },
    s3: { bucket: 'b', endpoint: 'http://minio:9000', region: 'us-east-1', prefix: 'p', forcePathStyle: true, secretRef: { name: 's', accessKeyIdKey: 'a', secretAccessKeyKey: 'b', sessionTokenKey: 't' } }
  },
  restoreFrom: { swarm: 'old', round: 100 },
  completion: { rounds: 1000, duration: '24h', onTrainerExit: false, podPolicy: 'Delete' },
  backoffLimit: 6,
  ttlSecondsAfterFinished: 3600
}

const fullStatus: Complete<AveragingSwarmStatus> = {
  observedGeneration: 1, phase: 'Ready', replicas: 1, readyReplicas: 1, auxiliaryReplicas: 0, auxiliaryReadyReplicas: 0,
  selector: 's', bootstrapPeers: [],
  conditions: [{ type: 'Ready', status: 'True', reason: 'r', message: 'm', lastTransitionTime: 't', observedGeneration: 1 }],
  roundsCompleted: 1, lastRoundTime: 't', meanGroupSize: 4,
  checkpoint: { round: 100, time: 't', location: 'pvc/c/demo/round-100.json', skipped: 1 }, completionTime: 't', failureTime: 't'
}

/** Keys of the schema's object nodes that the operator types (opaque Kubernetes types excluded). */
function typedKeys (s: Schema): string[] | undefined {
  if (s.type !== 'object' || s['x-kubernetes-preserve-unknown-fields'] === true || s.additionalProperties !== undefined) return undefined
  return Object.keys(s.properties ?? {}).sort()
}

function compare (s: Schema, value: unknown, path: string, problems: string[]): void {
  const keys = typedKeys(s)
  if (keys !== undefined && value !== null && typeof value === 'object' && !Array.isArray(value)) {
    const own = Object.keys(value).sort()
    for (const k of keys) if (!own.includes(k)) problems.push(`${path}.${k} is in the schema but not in the types`)
    for (const k of own) if (!keys.includes(k)) problems.push(`${path}.${k} is in the types but not in the schema`)
    for (const k of keys) if (k in value) compare(s.properties![k], (value as Record<string, unknown>)[k], `${path}.${k}`, problems)
  }
  if (s.items !== undefined && Array.isArray(value) && value.length > 0) compare(s.items, value[0], `${path}[]`, problems)
}

test('the TypeScript spec and status types name exactly the schema\'s fields', () => {
  const problems: string[] = []
  compare(specSchema, fullSpec, 'spec', problems)
  compare(statusSchema, fullStatus, 'status', problems)
  assert.deepEqual(problems, [])
  assert.deepEqual(Object.keys(swarmSchema.properties!).sort(), ['apiVersion', 'kind', 'metadata', 'spec', 'status'])
})

test('the type check has teeth: a field missing from the types is reported', () => {
  const problems: string[] = []
  const { suspend: _, ...withoutSuspend } = fullSpec
  compare(specSchema, withoutSuspend, 'spec', problems)
  assert.deepEqual(problems, ['spec.suspend is in the schema but not in the types'])
})

/** Paths and values of every `default:` in the schema, below nodes the server defaults too. */
function defaultsOf (s: Schema, path: string[], out: Array<[string[], unknown]>): void {
  for (const [k, v] of Object.entries(s.properties ?? {})) {
    if (v.default !== undefined && !(typeof v.default === 'object' && !Array.isArray(v.default))) out.push([[...path, k], v.default])
    if (v.type === 'object' && v.default !== undefined) defaultsOf(v, [...path, k], out)
  }
}

test('withDefaults() fills the same values the API server defaults from the schema', () => {
  const expected: Array<[string[], unknown]> = []
  defaultsOf(specSchema, [], expected)
  assert.ok(expected.length >= 15, `only ${expected.length} defaults found`)
  const filled = withDefaults({}) as unknown as Record<string, unknown>
  for (const [path, value] of expected) {
    const got = path.reduce<unknown>((o, k) => (o as Record<string, unknown>)?.[k], filled)
    assert.deepEqual(got, value, `default of spec.${path.join('.')}`)
  }
  assert.equal(withDefaults({ averaging: { targetGroupSize: 8 } }).averaging.minGroupSize, DEFAULT_AVERAGING.minGroupSize)
})

test('each object default spells out exactly its fields\' defaults (the API server checks it against CEL unexpanded)', () => {
  for (const [k, v] of Object.entries(specSchema.properties!)) {
    if (v.type !== 'object' || v.default === undefined) continue
    const fromFields = Object.fromEntries(Object.entries(v.properties ?? {}).filter(([, p]) => p.default !== undefined).map(([f, p]) => [f, p.default]))
    assert.deepEqual(v.default, fromFields, `spec.${k}`)
  }
})
