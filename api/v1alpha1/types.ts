/**
 * TypeScript shape of the AveragingSwarm custom resource (averaging.swarm.io/v1alpha1).
 * The OpenAPI schema in schema.ts is the source of truth for validation and defaults; the test
 * test/operator/api/schema-types.test.ts proves these interfaces name exactly the schema's fields.
 * Fields marked optional here may be absent on objects that did not pass the API server
 * (unit tests, the local runtime); withDefaults() in defaults.ts fills them like the server does.
 */

/** A Kubernetes core/v1 object kept opaque: the API server validates it, the operator copies it. */
export type KubeObject = Record<string, unknown>

/** core/v1 ResourceRequirements: quantities such as 1, "500m" or "8Gi" keyed by resource name. */
export interface ResourceRequirements {
  limits?: Record<string, string | number>
  requests?: Record<string, string | number>
}

export interface AveragingSpec {
  prefix?: string
  targetGroupSize: number
  minGroupSize: number
  initialGroupBits: string
  averagingExpiration: string
  requestTimeout: string
  allreduceTimeout: string
  partSizeBytes: number
  averagingAlpha: number
  compression: Compression
  period: string
  bandwidth?: number
  dataThreads: number
}

export type Compression = 'none' | 'float16' | 'uniform8bit' | 'blockwise8bit' | 'auto'
export type WorkloadType = 'builtin' | 'sidecar'

export interface BootstrapSpec {
  replicas: number
  peers: string[]
}

export interface AuxiliarySpec {
  replicas: number
  resources?: ResourceRequirements
}

export interface SecretKeyRef {
  name: string
  key: string
  generate: boolean
}

export type ExposeType = 'None' | 'HostPort' | 'NodePort' | 'LoadBalancer'

export interface ExposeServiceSpec {
  annotations?: Record<string, string>
  loadBalancerClass?: string
  externalTrafficPolicy: 'Cluster' | 'Local'
}

/** spec.network.expose: reaching the agents from outside the cluster (api/v1alpha1/expose-schema.ts). */
export interface ExposeSpec {
  type: ExposeType
  dataPort: number
  announceHost?: string
  service?: ExposeServiceSpec
}

/** spec.network.relay (api/v1alpha1/relay-schema.ts). */
export interface RelaySpec {
  serve: 'Bootstrap' | 'All' | 'None'
  maxReservations: number
  circuitMiB: number
  circuitDuration: string
}

export interface NetworkSpec {
  port: number
  privateNetworkSecret?: SecretKeyRef
  expose?: ExposeSpec
  relay?: RelaySpec
  /** auto (the default) | public | private. */
  reachability: 'auto' | 'public' | 'private'
}

export interface TrainerSpec {
  image: string
  imagePullPolicy?: string
  command?: string[]
  args?: string[]
  env?: KubeObject[]
  resources?: ResourceRequirements
}

export interface WorkloadSpec {
  type: WorkloadType
  sidecarPort: number
  trainer?: TrainerSpec
}

export interface MetricsSpec {
  port: number
  podMonitor: boolean
}

export interface PodTemplateOverrides {
  labels?: Record<string, string>
  annotations?: Record<string, string>
  env?: KubeObject[]
  containers?: KubeObject[]
  volumes?: KubeObject[]
  serviceAccountName?: string
  priorityClassName?: string
  schedulerName?: string
  imagePullSecrets?: KubeObject[]
  terminationGracePeriodSeconds?: number
}

export interface ClaimTemplate {
  /** Storage quantity, e.g. "10Gi". */
  size: string
  storageClassName?: string
  accessModes: Array<'ReadWriteMany' | 'ReadWriteOnce'>
}

/** Exactly one of claimName and claimTemplate (a CEL rule). */
export interface CheckpointVolume {
  claimName?: string
  claimTemplate?: ClaimTemplate
}

export interface S3SecretRef {
  name: string
  accessKeyIdKey: string
  secretAccessKeyKey: string
  sessionTokenKey?: string
}

export interface CheckpointS3 {
  bucket: string
  endpoint?: string
  region: string
  prefix?: string
  forcePathStyle: boolean
  secretRef: S3SecretRef
}

/** Exactly one of volume and s3 (a CEL rule). */
export interface CheckpointSpec {
  every: number
  keep: number
  /** Go duration: a round is also checkpointed once this long has passed since the newest checkpoint. */
  interval?: string
  volume?: CheckpointVolume
  s3?: CheckpointS3
}

export interface RestoreFromSpec {
  swarm: string
  round?: number
}

export type PodPolicy = 'Delete' | 'Keep'

export interface CompletionSpec {
  rounds?: number
  /** Go duration counted from the swarm's creation. */
  duration?: string
  onTrainerExit: boolean
  podPolicy: PodPolicy
}

export interface AveragingSwarmSpec {
  replicas: number
  image?: string
  imagePullPolicy?: string
  resources?: ResourceRequirements
  nodeSelector?: Record<string, string>
  tolerations?: KubeObject[]
  affinity?: KubeObject
  podTemplate?: PodTemplateOverrides
  averaging: AveragingSpec
  bootstrap: BootstrapSpec
  auxiliary: AuxiliarySpec
  network: NetworkSpec
  workload: WorkloadSpec
  metrics: MetricsSpec
  logLevel: string
  suspend: boolean
  checkpoint?: CheckpointSpec
  restoreFrom?: RestoreFromSpec
  completion?: CompletionSpec
  backoffLimit?: number
  ttlSecondsAfterFinished?: number
}

export type ConditionType = 'Ready' | 'Progressing' | 'Degraded' | 'Suspended' | 'Complete' | 'Failed' | 'CheckpointsFailing'
export type ConditionStatus = 'True' | 'False' | 'Unknown'
export type Phase = 'Pending' | 'Progressing' | 'Ready' | 'Degraded' | 'Suspended' | 'Succeeded' | 'Failed'

/** The newest durable checkpoint the agents report. */
export interface CheckpointStatus {
  round?: number
  time?: string
  location?: string
  /** Checkpoints restoring agents skipped as torn, corrupt or of other tensors. */
  skipped?: number
}

/** metav1.Condition. */
export interface Condition {
  type: ConditionType
  status: ConditionStatus
  reason: string
  message: string
  lastTransitionTime: string
  observedGeneration?: number
}

export interface AveragingSwarmStatus {
  observedGeneration?: number
  phase?: Phase
  replicas?: number
  readyReplicas?: number
  auxiliaryReplicas?: number
  auxiliaryReadyReplicas?: number
  selector?: string
  bootstrapPeers?: string[]
  conditions?: Condition[]
  roundsCompleted?: number
  lastRoundTime?: string
  meanGroupSize?: number
  checkpoint?: CheckpointStatus
  completionTime?: string
  failureTime?: string
}

export interface ObjectMeta {
  name: string
  namespace?: string
  uid?: string
  generation?: number
  /** Set by the API server; spec.completion.duration counts from it. */
  creationTimestamp?: string
  resourceVersion?: string
  labels?: Record<string, string>
  annotations?: Record<string, string>
  deletionTimestamp?: string
}

export interface AveragingSwarm {
  apiVersion: string
  kind: string
  metadata: ObjectMeta
  spec: AveragingSwarmSpec
  status?: AveragingSwarmStatus
}
