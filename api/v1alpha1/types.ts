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

export interface NetworkSpec {
  port: number
  privateNetworkSecret?: SecretKeyRef
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

export interface CheckpointSpec {
  every: number
  keep: number
  volume: { claimName: string }
}

export type PodPolicy = 'Delete' | 'Keep'

export interface CompletionSpec {
  rounds?: number
  /** Go duration counted from the swarm's creation. */
  duration?: string
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
  completion?: CompletionSpec
  ttlSecondsAfterFinished?: number
}

export type ConditionType = 'Ready' | 'Progressing' | 'Degraded' | 'Suspended' | 'Complete' | 'CheckpointsFailing'
export type ConditionStatus = 'True' | 'False' | 'Unknown'
export type Phase = 'Pending' | 'Progressing' | 'Ready' | 'Degraded' | 'Suspended' | 'Succeeded'

/** The newest durable checkpoint the agents report. */
export interface CheckpointStatus {
  round?: number
  time?: string
  location?: string
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
