/**
 * Malformed AveragingSwarms the API server must reject, each with the field its message must
 * name. Used by the schema test here (the cases the OpenAPI part alone catches) and by the
 * end-to-end test against a real kube-apiserver (all cases, CEL rules included).
 */
export interface MalformedCase {
  /** What is wrong, in words. */
  what: string
  /** The field path the rejection message must contain. */
  field: string
  /** Caught by a CEL rule (only a real API server evaluates these). */
  cel?: boolean
  /** metadata.name when the case is about it. */
  name?: string
  spec: Record<string, unknown>
}

export const MALFORMED: MalformedCase[] = [
  { what: 'replicas is a string', field: 'spec.replicas', spec: { replicas: 'eight' } },
  { what: 'negative replicas', field: 'spec.replicas', spec: { replicas: -1 } },
  { what: 'target group of one', field: 'spec.averaging.targetGroupSize', spec: { averaging: { targetGroupSize: 1, minGroupSize: 1 } } },
  { what: 'min group above target group', field: 'spec.averaging.minGroupSize', cel: true, spec: { averaging: { targetGroupSize: 4, minGroupSize: 5 } } },
  { what: 'duration without a unit', field: 'spec.averaging.averagingExpiration', spec: { averaging: { averagingExpiration: '15' } } },
  { what: 'duration in days', field: 'spec.averaging.period', spec: { averaging: { period: '1d' } } },
  { what: 'request timeout not below averaging expiration', field: 'spec.averaging.requestTimeout', cel: true, spec: { averaging: { requestTimeout: '20s', averagingExpiration: '15s' } } },
  { what: 'unknown compression', field: 'spec.averaging.compression', spec: { averaging: { compression: 'zstd' } } },
  { what: 'bootstrap peer without /p2p', field: 'spec.bootstrap.peers[0]', spec: { bootstrap: { replicas: 1, peers: ['/ip4/10.0.0.1/tcp/4001'] } } },
  { what: 'bootstrap peer that is not a multiaddr', field: 'spec.bootstrap.peers[0]', spec: { bootstrap: { replicas: 1, peers: ['10.0.0.1:4001'] } } },
  { what: 'bootstrap peer with a port above 65535', field: 'spec.bootstrap.peers[0]', spec: { bootstrap: { replicas: 1, peers: ['/ip4/10.0.0.1/tcp/65536/p2p/12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA'] } } },
  { what: 'bootstrap peer with an IPv4 octet above 255', field: 'spec.bootstrap.peers[0]', spec: { bootstrap: { replicas: 1, peers: ['/ip4/10.0.0.256/tcp/4001/p2p/12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA'] } } },
  { what: 'bootstrap peer over a transport agents do not dial (websockets)', field: 'spec.bootstrap.peers[0]', spec: { bootstrap: { replicas: 1, peers: ['/ip4/10.0.0.1/tcp/4001/ws/p2p/12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA'] } } },
  { what: 'more bootstrap agents than agents', field: 'spec.bootstrap.replicas', cel: true, spec: { replicas: 2, bootstrap: { replicas: 3 } } },
  { what: 'no bootstrap agent and no external peer', field: 'spec.bootstrap.replicas', cel: true, spec: { bootstrap: { replicas: 0 } } },
  { what: 'group bits other than 0 and 1', field: 'spec.averaging.initialGroupBits', spec: { averaging: { initialGroupBits: '012' } } },
  { what: 'prefix with a dot', field: 'spec.averaging.prefix', spec: { averaging: { prefix: 'team.demo' } } },
  { what: 'p2p port out of range', field: 'spec.network.port', spec: { network: { port: 70000 } } },
  { what: 'metrics port zero', field: 'spec.metrics.port', spec: { metrics: { port: 0 } } },
  { what: 'metrics port equal to the p2p port', field: 'spec.metrics.port', cel: true, spec: { network: { port: 9400 } } },
  { what: 'unknown workload type', field: 'spec.workload.type', spec: { workload: { type: 'pytorch' } } },
  { what: 'sidecar workload without a trainer', field: 'spec.workload.trainer', cel: true, spec: { workload: { type: 'sidecar' } } },
  { what: 'averaging alpha zero', field: 'spec.averaging.averagingAlpha', spec: { averaging: { averagingAlpha: 0 } } },
  { what: 'parts smaller than 1 KiB', field: 'spec.averaging.partSizeBytes', spec: { averaging: { partSizeBytes: 10 } } },
  { what: 'parts larger than the agent accepts (4 MiB)', field: 'spec.averaging.partSizeBytes', spec: { averaging: { partSizeBytes: 8388608 } } },
  { what: 'negative data threads', field: 'spec.averaging.dataThreads', spec: { averaging: { dataThreads: -1 } } },
  { what: 'suspend is a string', field: 'spec.suspend', spec: { suspend: 'yes' } },
  { what: 'PSK secret without a name', field: 'spec.network.privateNetworkSecret.name', spec: { network: { privateNetworkSecret: { key: 'swarm.key' } } } },
  // Keys and values the StatefulSet would be refused for, refused on the swarm instead (api/v1alpha1/spec-rules.ts).
  { what: 'pod label key with a space', field: 'spec.podTemplate.labels', cel: true, spec: { podTemplate: { labels: { 'my label': 'x' } } } },
  { what: 'pod label value with a space', field: 'spec.podTemplate.labels.app', spec: { podTemplate: { labels: { app: 'has space' } } } },
  { what: 'pod label value of 64 characters', field: 'spec.podTemplate.labels.app', spec: { podTemplate: { labels: { app: 'v'.repeat(64) } } } },
  { what: 'pod annotation key starting with a dash', field: 'spec.podTemplate.annotations', cel: true, spec: { podTemplate: { annotations: { '-x': 'free text' } } } },
  { what: 'node selector key with an upper-case prefix', field: 'spec.nodeSelector', cel: true, spec: { nodeSelector: { 'UPPER.com/x': 'v' } } },
  { what: 'trainer resource name with a "!"', field: 'spec.workload.trainer.resources.limits', cel: true, spec: { workload: { type: 'sidecar', trainer: { image: 'trainer', resources: { limits: { 'gpu!': 1 } } } } } },
  { what: 'GPU requested without a limit', field: 'spec.workload.trainer.resources.requests', cel: true, spec: { workload: { type: 'sidecar', trainer: { image: 'trainer', resources: { requests: { 'nvidia.com/gpu': 1 } } } } } },
  { what: 'half a GPU', field: 'spec.resources.limits', cel: true, spec: { resources: { limits: { 'nvidia.com/gpu': '0.5' } } } },
  { what: 'a memory request above its limit', field: 'spec.resources.requests', cel: true, spec: { resources: { requests: { memory: '2Gi' }, limits: { memory: '1Gi' } } } },
  { what: 'hugepages (not a resource swarms take)', field: 'spec.resources.limits', cel: true, spec: { resources: { limits: { 'hugepages-2Mi': '2Mi', memory: '1Gi' } } } },
  { what: 'toleration of every key with operator Equal', field: 'spec.tolerations', cel: true, spec: { tolerations: [{ operator: 'Equal', value: 'x' }] } },
  { what: 'toleration with operator Exists and a value', field: 'spec.tolerations', cel: true, spec: { tolerations: [{ key: 'gpu', operator: 'Exists', value: 'x' }] } },
  { what: 'toleration seconds without effect NoExecute', field: 'spec.tolerations', cel: true, spec: { tolerations: [{ key: 'gpu', operator: 'Exists', effect: 'NoSchedule', tolerationSeconds: 30 }] } },
  { what: 'extra container named agent', field: 'spec.podTemplate.containers', cel: true, spec: { podTemplate: { containers: [{ name: 'agent', image: 'busybox' }] } } },
  { what: 'extra container without an image', field: 'spec.podTemplate.containers[0].image', spec: { podTemplate: { containers: [{ name: 'shipper' }] } } },
  { what: 'extra container name with a capital', field: 'spec.podTemplate.containers[0].name', spec: { podTemplate: { containers: [{ name: 'Shipper', image: 'busybox' }] } } },
  { what: 'service account name with a space', field: 'spec.podTemplate.serviceAccountName', spec: { podTemplate: { serviceAccountName: 'my account' } } },
  { what: 'service annotation key with two slashes', field: 'spec.network.expose.service.annotations', cel: true, spec: { network: { expose: { type: 'NodePort', service: { annotations: { 'a/b/c': 'v' } } } } } },
  { what: 'name too long for the derived object names', field: 'metadata.name', cel: true, name: 'a-swarm-name-that-is-far-too-long-for-its-pods', spec: {} },
  { what: 'GPU count that is not a quantity', field: 'spec.resources.limits', spec: { resources: { limits: { 'nvidia.com/gpu': 'one' } } } },
  // Admitted must mean runnable: each of these once passed the API server and crash-looped every agent.
  { what: 'all-reduce timeout of zero', field: 'spec.averaging.allreduceTimeout', cel: true, spec: { averaging: { allreduceTimeout: '0s' } } },
  { what: 'all-reduce timeout of one nanosecond', field: 'spec.averaging.allreduceTimeout', cel: true, spec: { averaging: { allreduceTimeout: '1ns' } } },
  { what: 'all-reduce timeout of 25 days (past a Node timer)', field: 'spec.averaging.allreduceTimeout', cel: true, spec: { averaging: { allreduceTimeout: '600h' } } },
  { what: 'averaging expiration of zero', field: 'spec.averaging.averagingExpiration', cel: true, spec: { averaging: { averagingExpiration: '0s', requestTimeout: '0s' } } },
  { what: 'request timeout of zero', field: 'spec.averaging.requestTimeout', cel: true, spec: { averaging: { requestTimeout: '0s' } } },
  { what: 'period of zero', field: 'spec.averaging.period', cel: true, spec: { averaging: { period: '0s' } } },
  { what: 'min group of one', field: 'spec.averaging.minGroupSize', spec: { averaging: { minGroupSize: 1 } } },
  { what: 'prefix with a colon', field: 'spec.averaging.prefix', spec: { averaging: { prefix: 'team:demo' } } },
  { what: 'bandwidth of zero', field: 'spec.averaging.bandwidth', spec: { averaging: { bandwidth: 0 } } },
  { what: 'negative auxiliary CPU request', field: 'spec.auxiliary.resources.requests', spec: { auxiliary: { replicas: 1, resources: { requests: { cpu: '-1' } } } } },
  { what: 'negative GPU limit as a number', field: 'spec.resources.limits', spec: { resources: { limits: { 'nvidia.com/gpu': -1 } } } },
  { what: 'checkpoint every 0 rounds', field: 'spec.checkpoint.every', spec: { checkpoint: { every: 0, volume: { claimName: 'ckpt' } } } },
  { what: 'checkpoint keeping none', field: 'spec.checkpoint.keep', spec: { checkpoint: { keep: 0, volume: { claimName: 'ckpt' } } } },
  { what: 'relay served by nobody in particular', field: 'spec.network.relay.serve', spec: { network: { relay: { serve: 'Some' } } } },
  { what: 'relay with no slots', field: 'spec.network.relay.maxReservations', spec: { network: { relay: { maxReservations: 0 } } } },
  { what: 'relay circuits of more than 1 TiB', field: 'spec.network.relay.circuitMiB', spec: { network: { relay: { circuitMiB: 1_048_577 } } } },
  { what: 'relay circuits living more than a day', field: 'spec.network.relay.circuitDuration', cel: true, spec: { network: { relay: { circuitDuration: '25h' } } } },
  { what: 'reachability that is not auto, public or private', field: 'spec.network.reachability', spec: { network: { reachability: 'nat' } } },
  { what: 'checkpoint interval below 10 s', field: 'spec.checkpoint.interval', cel: true, spec: { checkpoint: { interval: '5s', volume: { claimName: 'ckpt' } } } },
  { what: 'checkpoint interval that is not a duration', field: 'spec.checkpoint.interval', spec: { checkpoint: { interval: 'hourly', volume: { claimName: 'ckpt' } } } },
  { what: 'checkpoint keeping more than 1000', field: 'spec.checkpoint.keep', spec: { checkpoint: { keep: 1001, volume: { claimName: 'ckpt' } } } },
  { what: 'checkpoint with neither volume nor s3', field: 'spec.checkpoint', cel: true, spec: { checkpoint: { every: 10 } } },
  { what: 'checkpoint with both volume and s3', field: 'spec.checkpoint', cel: true, spec: { checkpoint: { volume: { claimName: 'ckpt' }, s3: { bucket: 'models', secretRef: { name: 'creds' } } } } },
  { what: 'checkpoint volume with neither claimName nor claimTemplate', field: 'spec.checkpoint.volume', cel: true, spec: { checkpoint: { volume: {} } } },
  { what: 'checkpoint volume with both claimName and claimTemplate', field: 'spec.checkpoint.volume', cel: true, spec: { checkpoint: { volume: { claimName: 'ckpt', claimTemplate: { size: '1Gi' } } } } },
  { what: 'claim template without a size', field: 'spec.checkpoint.volume.claimTemplate.size', spec: { checkpoint: { volume: { claimTemplate: { storageClassName: 'fast' } } } } },
  { what: 'claim template of size zero', field: 'spec.checkpoint.volume.claimTemplate.size', spec: { checkpoint: { volume: { claimTemplate: { size: '0Gi' } } } } },
  { what: 'claim template size that is not a quantity', field: 'spec.checkpoint.volume.claimTemplate.size', spec: { checkpoint: { volume: { claimTemplate: { size: 'ten gigs' } } } } },
  { what: 'claim template that is ReadOnlyMany', field: 'spec.checkpoint.volume.claimTemplate.accessModes[0]', spec: { checkpoint: { volume: { claimTemplate: { size: '1Gi', accessModes: ['ReadOnlyMany'] } } } } },
  { what: 'claim template storage class that is not a DNS-1123 subdomain', field: 'spec.checkpoint.volume.claimTemplate.storageClassName', spec: { checkpoint: { volume: { claimTemplate: { size: '1Gi', storageClassName: 'Fast_SSD' } } } } },
  { what: 's3 without a bucket', field: 'spec.checkpoint.s3.bucket', spec: { checkpoint: { s3: { secretRef: { name: 'creds' } } } } },
  { what: 's3 without a secretRef', field: 'spec.checkpoint.s3.secretRef', spec: { checkpoint: { s3: { bucket: 'models' } } } },
  { what: 's3 bucket of two characters', field: 'spec.checkpoint.s3.bucket', spec: { checkpoint: { s3: { bucket: 'ab', secretRef: { name: 'creds' } } } } },
  { what: 's3 bucket with upper case', field: 'spec.checkpoint.s3.bucket', spec: { checkpoint: { s3: { bucket: 'Models', secretRef: { name: 'creds' } } } } },
  { what: 's3 bucket of 64 characters', field: 'spec.checkpoint.s3.bucket', spec: { checkpoint: { s3: { bucket: 'b'.repeat(64), secretRef: { name: 'creds' } } } } },
  { what: 's3 endpoint without a scheme', field: 'spec.checkpoint.s3.endpoint', spec: { checkpoint: { s3: { bucket: 'models', endpoint: 'minio:9000', secretRef: { name: 'creds' } } } } },
  { what: 's3 endpoint with a path', field: 'spec.checkpoint.s3.endpoint', spec: { checkpoint: { s3: { bucket: 'models', endpoint: 'http://minio:9000/s3', secretRef: { name: 'creds' } } } } },
  { what: 's3 endpoint port out of range', field: 'spec.checkpoint.s3.endpoint', spec: { checkpoint: { s3: { bucket: 'models', endpoint: 'http://minio:65536', secretRef: { name: 'creds' } } } } },
  { what: 's3 prefix with a leading slash', field: 'spec.checkpoint.s3.prefix', spec: { checkpoint: { s3: { bucket: 'models', prefix: '/runs', secretRef: { name: 'creds' } } } } },
  { what: 's3 prefix with a doubled slash', field: 'spec.checkpoint.s3.prefix', spec: { checkpoint: { s3: { bucket: 'models', prefix: 'runs//a', secretRef: { name: 'creds' } } } } },
  { what: 's3 secretRef without a name', field: 'spec.checkpoint.s3.secretRef.name', spec: { checkpoint: { s3: { bucket: 'models', secretRef: { accessKeyIdKey: 'id' } } } } },
  { what: 's3 secret key with a slash', field: 'spec.checkpoint.s3.secretRef.sessionTokenKey', spec: { checkpoint: { s3: { bucket: 'models', secretRef: { name: 'creds', sessionTokenKey: 'a/b' } } } } },
  { what: 'restoreFrom without checkpoint', field: 'spec.restoreFrom', cel: true, spec: { restoreFrom: { swarm: 'old' } } },
  { what: 'restoreFrom without a swarm', field: 'spec.restoreFrom.swarm', spec: { checkpoint: { volume: { claimName: 'ckpt' } }, restoreFrom: { round: 5 } } },
  { what: 'restoreFrom swarm that is not a DNS-1123 name', field: 'spec.restoreFrom.swarm', spec: { checkpoint: { volume: { claimName: 'ckpt' } }, restoreFrom: { swarm: 'Old_Run' } } },
  { what: 'restoreFrom round 0', field: 'spec.restoreFrom.round', spec: { checkpoint: { volume: { claimName: 'ckpt' } }, restoreFrom: { swarm: 'old', round: 0 } } },
  { what: 'completion on trainer exit of a builtin workload', field: 'spec.completion.onTrainerExit', cel: true, spec: { completion: { onTrainerExit: true } } },
  { what: 'negative backoffLimit', field: 'spec.backoffLimit', spec: { backoffLimit: -1 } },
  { what: 'checkpoint claim name that is not a DNS-1123 subdomain', field: 'spec.checkpoint.volume.claimName', spec: { checkpoint: { volume: { claimName: 'My_Claim' } } } },
  { what: 'completion after 0 rounds', field: 'spec.completion.rounds', spec: { completion: { rounds: 0 } } },
  { what: 'completion past 1e12 rounds', field: 'spec.completion.rounds', spec: { completion: { rounds: 1000000000001 } } },
  { what: 'completion with neither rounds nor duration', field: 'spec.completion', cel: true, spec: { completion: { podPolicy: 'Keep' } } },
  { what: 'completion with onTrainerExit false and nothing else', field: 'spec.completion', cel: true, spec: { workload: { type: 'sidecar', trainer: { image: 'trainer:1' } }, completion: { onTrainerExit: false } } },
  { what: 'completion after 30 seconds', field: 'spec.completion.duration', cel: true, spec: { completion: { duration: '30s' } } },
  { what: 'completion duration that is not a duration', field: 'spec.completion.duration', spec: { completion: { duration: 'two hours' } } },
  { what: 'unknown completion pod policy', field: 'spec.completion.podPolicy', spec: { completion: { rounds: 10, podPolicy: 'Retain' } } },
  { what: 'negative ttlSecondsAfterFinished', field: 'spec.ttlSecondsAfterFinished', spec: { completion: { rounds: 10 }, ttlSecondsAfterFinished: -1 } },
  { what: 'ttlSecondsAfterFinished without completion', field: 'spec.ttlSecondsAfterFinished', cel: true, spec: { ttlSecondsAfterFinished: 60 } },
  { what: 'unknown exposure type', field: 'spec.network.expose.type', spec: { network: { expose: { type: 'Ingress' } } } },
  { what: 'announceHost with a port', field: 'spec.network.expose.announceHost', spec: { network: { expose: { type: 'HostPort', announceHost: 'gw.example.com:4001' } } } },
  { what: 'announceHost that is neither a name nor an IPv6 address', field: 'spec.network.expose.announceHost', spec: { network: { expose: { type: 'HostPort', announceHost: 'fe80:::1' } } } },
  { what: 'unknown externalTrafficPolicy', field: 'spec.network.expose.service.externalTrafficPolicy', spec: { network: { expose: { type: 'NodePort', service: { externalTrafficPolicy: 'Nearest' } } } } },
  { what: 'data port equal to the libp2p port', field: 'spec.network.expose.dataPort', cel: true, spec: { network: { port: 4001, expose: { type: 'HostPort', dataPort: 4001 } } } },
  { what: 'data port equal to the default metrics port', field: 'spec.network.expose.dataPort', cel: true, spec: { network: { expose: { type: 'NodePort', dataPort: 9400 } } } },
  { what: 'negative trainer memory limit', field: 'spec.workload.trainer.resources.limits', spec: { workload: { type: 'sidecar', trainer: { image: 'trainer:1', resources: { limits: { memory: '-8Gi' } } } } } }
]

/** The full object to POST for a case. */
export function malformedSwarm (c: MalformedCase, i: number, namespace = 'default'): Record<string, unknown> {
  return { apiVersion: 'averaging.swarm.io/v1alpha1', kind: 'AveragingSwarm', metadata: { name: c.name ?? `bad-${i}`, namespace }, spec: c.spec }
}
