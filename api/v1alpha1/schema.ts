/**
 * The OpenAPI v3 schema of AveragingSwarm: the single source of truth for field names,
 * descriptions, defaults and validation. crds/averagingswarm.yaml is generated from it
 * (npm run generate:crd) and a test fails when the committed YAML differs.
 */
import { DEFAULTS } from './defaults.js'
import { averagingSchema } from './averaging-schema.js'
import { arr, bool, int, LABEL_VALUE, labelMap, num, obj, opaque, resourceRequirements, str, stringMap, type Schema } from './schema-builders.js'
import { backoffLimit, checkpoint, checkpointStatus, completion, restoreFrom, specRules, ttlSecondsAfterFinished } from './checkpoint-schema.js'
import { expose, exposeRules } from './expose-schema.js'
import { reachability, relay, relayRules } from './relay-schema.js'
import { DEFAULT_REACHABILITY } from '../relay-parameters.js'
import { MULTIADDR_PATTERN } from './address-patterns.js'
import { NAME_RULE, QUALIFIED_NAME, swarmRules } from './spec-rules.js'
import { DNS1123_SUBDOMAIN } from '../checkpoint-parameters.js'

export { DURATION_PATTERN, COMPRESSIONS } from '../averaging-parameters.js'
export { MULTIADDR_PATTERN } from './address-patterns.js'
export const WORKLOAD_TYPES = ['builtin', 'sidecar'] as const
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error'] as const
const PULL_POLICIES = ['Always', 'IfNotPresent', 'Never'] as const
export const PHASES = ['Pending', 'Progressing', 'Ready', 'Degraded', 'Suspended', 'Succeeded', 'Failed'] as const

const port = (description: string, dflt: number): Schema => int(description, { minimum: 1, maximum: 65535, default: dflt })

/** An image reference as a pod takes it: no whitespace at either end. */
const IMAGE = '^\\S(.*\\S)?$'

// value and valueFrom exclude each other (ENV_RULES in spec-rules.ts).
const envVars = (description: string): Schema => arr(description, opaque('One environment variable: name plus value or valueFrom, as in a core/v1 container.', {
  required: ['name'],
  properties: {
    name: str('Name of the variable: printable ASCII characters other than "=".', { minLength: 1, pattern: '^[ -<>-~]+$' }),
    value: str('Its value.', { maxLength: 32768 }),
    valueFrom: opaque('Where its value comes from (a core/v1 EnvVarSource: fieldRef, secretKeyRef, ...), instead of value.')
  }
}), { maxItems: 128 })

// Derived from the parameter table (api/averaging-parameters.ts), as are the agent's env and defaults.
const averaging = averagingSchema()

const bootstrap = obj('Bootstrap agents: agents with stable libp2p identities (kept in a Secret) that every other agent dials first.', {
  replicas: int('Number of bootstrap agents; they count toward spec.replicas.', { minimum: 0, maximum: 16, default: DEFAULTS.bootstrapReplicas }),
  peers: arr('Extra bootstrap multiaddrs outside this swarm, e.g. a swarm in another cluster: /dns4/<host>/tcp/<port>/p2p/<peer id>.',
    str('A libp2p TCP multiaddr ending in /p2p/<peer id>, the id of an agent (12D3KooW…: agents have Ed25519 keys).', { pattern: MULTIADDR_PATTERN, maxLength: 512 }), { maxItems: 64, default: [] })
}, { default: { replicas: DEFAULTS.bootstrapReplicas, peers: [] } })

const auxiliary = obj('Auxiliary agents: CPU-only helpers that take a share of the reduction but hold no tensors of their own (weight 0).', {
  replicas: int('Number of auxiliary agents.', { minimum: 0, maximum: 10000, default: DEFAULTS.auxiliaryReplicas }),
  resources: resourceRequirements('Compute resources of each auxiliary agent; GPUs are never requested for them.')
}, { default: { replicas: DEFAULTS.auxiliaryReplicas } })

const network = obj('libp2p networking of the agents.', {
  port: port('TCP port each agent listens on for libp2p.', DEFAULTS.p2pPort),
  privateNetworkSecret: obj('A Secret holding a libp2p pre-shared key (swarm.key format); agents without it cannot connect to the swarm.', {
    name: str('Name of the Secret in the swarm\'s namespace.', { minLength: 1, pattern: '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$' }),
    key: str('Key inside the Secret that holds the pre-shared key.', { default: DEFAULTS.pskKey, pattern: '^[-._a-zA-Z0-9]+$' }),
    generate: bool('Create the Secret with a fresh random key when it does not exist; the swarm then owns it.', { default: false })
  }, { required: ['name'] }),
  expose,
  relay,
  reachability
}, { default: { port: DEFAULTS.p2pPort, reachability: DEFAULT_REACHABILITY } })

const trainer = obj('The trainer container that runs next to each agent when workload.type is sidecar.', {
  image: str('Image of the trainer container.', { minLength: 1, maxLength: 512, pattern: IMAGE }),
  imagePullPolicy: str('Pull policy of the trainer image.', { enum: PULL_POLICIES }),
  command: arr('Entrypoint of the trainer container.', str('One argument.', { maxLength: 4096 }), { maxItems: 64 }),
  args: arr('Arguments of the trainer container.', str('One argument.', { maxLength: 4096 }), { maxItems: 256 }),
  env: envVars('Extra environment of the trainer container; AVS_SIDECAR_PORT is always set.'),
  resources: resourceRequirements('Compute resources of the trainer container; the GPU usually goes here.')
}, { required: ['image'] })

const workload = obj('What produces the tensors the agents average.', {
  type: str('builtin: the agent trains a small tfjs model on its own data shard; sidecar: a trainer container hands tensors to the agent through its loopback API.', { enum: WORKLOAD_TYPES, default: DEFAULTS.workloadType }),
  sidecarPort: port('Loopback TCP port of the agent\'s API for the trainer (sidecar workload).', DEFAULTS.sidecarPort),
  trainer
}, { default: { type: DEFAULTS.workloadType, sidecarPort: DEFAULTS.sidecarPort } })

const metrics = obj('Prometheus metrics of the agents.', {
  port: port('HTTP port serving /metrics, /healthz and /readyz on every agent.', DEFAULTS.metricsPort),
  podMonitor: bool('Create a PodMonitor for the agents when the Prometheus Operator\'s CRDs are installed.', { default: DEFAULTS.podMonitor })
}, { default: { port: DEFAULTS.metricsPort, podMonitor: DEFAULTS.podMonitor } })

/** A DNS label, as Kubernetes names containers and volumes. */
const DNS1123_LABEL = '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'
/** A name of another object in the namespace (a ServiceAccount, a PriorityClass): a DNS subdomain. */
const objectName = (description: string): Schema => str(description, { maxLength: 253, pattern: DNS1123_SUBDOMAIN })

// The rules between a toleration's fields are the pod's own (TOLERATION_RULES in spec-rules.ts).
const tolerations = arr('Tolerations of the agent pods, e.g. for tainted GPU nodes.', obj('A core/v1 Toleration.', {
  key: str('Taint key the toleration applies to (a qualified name); empty with operator Exists matches every key.', { maxLength: 317, pattern: `^$|${QUALIFIED_NAME}` }),
  operator: str('Exists or Equal (the default).', { enum: ['Exists', 'Equal'] }),
  value: str('Taint value the toleration matches (operator Equal; empty with Exists).', { maxLength: 63, pattern: LABEL_VALUE }),
  effect: str('Taint effect to match: NoSchedule, PreferNoSchedule or NoExecute; empty matches all.', { enum: ['', 'NoSchedule', 'PreferNoSchedule', 'NoExecute'] }),
  tolerationSeconds: int('How long a NoExecute taint is tolerated before eviction (effect NoExecute only).')
}), { maxItems: 64 })

const podTemplate = obj('Overrides merged into every agent pod.', {
  labels: labelMap('Extra pod labels.'),
  annotations: stringMap('Extra pod annotations.'),
  env: envVars('Extra environment of the agent container; variables the operator sets cannot be overridden.'),
  containers: arr('Extra containers added to every agent pod (log shippers, proxies).', opaque('A core/v1 Container.', {
    required: ['name', 'image'],
    properties: {
      name: str('Container name (a DNS label); must not be agent or trainer.', { minLength: 1, maxLength: 63, pattern: DNS1123_LABEL }),
      image: str('Image of the container.', { maxLength: 512, pattern: IMAGE })
    }
  }), { maxItems: 8 }),
  volumes: arr('Extra volumes, for the extra containers.', opaque('A core/v1 Volume.', {
    required: ['name'], properties: { name: str('Volume name (a DNS label).', { minLength: 1, maxLength: 63, pattern: DNS1123_LABEL }) }
  }), { maxItems: 16 }),
  serviceAccountName: objectName('Service account of the agent pods.'),
  priorityClassName: objectName('Priority class of the agent pods.'),
  schedulerName: str('Scheduler of the agent pods, e.g. a gang scheduler.'),
  imagePullSecrets: arr('Secrets used to pull the images.', obj('A reference to a Secret.', { name: str('Secret name.') }), { maxItems: 16 }),
  terminationGracePeriodSeconds: int('Seconds an agent gets to leave its group after SIGTERM.', { minimum: 0, maximum: 3600 })
})

export const specSchema: Schema = obj('Desired state of the swarm.', {
  replicas: int('Number of agents, bootstrap agents included (kubectl scale sets this).', { minimum: 0, maximum: 100000, default: DEFAULTS.replicas }),
  image: str('Agent image; defaults to the operator\'s configured image.', { maxLength: 512, pattern: IMAGE }),
  imagePullPolicy: str('Pull policy of the agent image.', { enum: PULL_POLICIES, default: DEFAULTS.imagePullPolicy }),
  resources: resourceRequirements('Compute resources of each agent, e.g. {"limits": {"nvidia.com/gpu": 1}}.'),
  nodeSelector: labelMap('Node labels an agent pod\'s node must have.'),
  tolerations,
  affinity: opaque('A core/v1 Affinity for the agent pods.'),
  podTemplate,
  averaging,
  bootstrap,
  auxiliary,
  network,
  workload,
  metrics,
  logLevel: str('Log level of the agents.', { enum: LOG_LEVELS, default: DEFAULTS.logLevel }),
  suspend: bool('Scale every agent to zero while keeping identities and configuration; false resumes.', { default: false }),
  checkpoint,
  restoreFrom,
  completion,
  backoffLimit,
  ttlSecondsAfterFinished
}, {
  'x-kubernetes-validations': [
    ...specRules(),
    ...exposeRules(),
    ...relayRules(),
    ...swarmRules()
  ]
})

const condition = obj('A metav1.Condition.', {
  type: str('Ready, Progressing, Degraded, Suspended, Complete, Failed or CheckpointsFailing.', { maxLength: 64 }),
  status: str('True, False or Unknown.', { enum: ['True', 'False', 'Unknown'] }),
  reason: str('CamelCase reason for the last transition.', { maxLength: 1024 }),
  message: str('What a person should know, in one sentence.', { maxLength: 32768 }),
  lastTransitionTime: str('When status last changed.', { format: 'date-time' }),
  observedGeneration: int('metadata.generation this condition was computed from.', { minimum: 0 })
}, { required: ['type', 'status', 'reason', 'message', 'lastTransitionTime'] })

export const statusSchema: Schema = obj('Observed state of the swarm, written by the operator.', {
  observedGeneration: int('metadata.generation of the spec the operator last reconciled.'),
  phase: str('Summary: Pending, Progressing, Ready, Degraded, Suspended, Succeeded once the swarm is Complete, or Failed once spec.backoffLimit is exceeded.', { enum: PHASES }),
  replicas: int('Agent pods that exist (bootstrap and regular).'),
  readyReplicas: int('Agent pods that are Ready.'),
  auxiliaryReplicas: int('Auxiliary pods that exist.'),
  auxiliaryReadyReplicas: int('Auxiliary pods that are Ready.'),
  selector: str('Label selector of the agent pods (for the scale subresource and autoscalers).', { maxLength: 1024 }),
  bootstrapPeers: arr('Multiaddrs of the bootstrap agents, for peers outside the cluster.', str('A libp2p multiaddr.', { maxLength: 512 })),
  conditions: arr('Ready, Progressing, Degraded and Suspended, each with a reason; Complete with spec.completion, Failed with spec.backoffLimit, CheckpointsFailing with spec.checkpoint.', condition, {
    'x-kubernetes-list-type': 'map', 'x-kubernetes-list-map-keys': ['type'], maxItems: 8
  }),
  roundsCompleted: int('Most successful averaging rounds completed by one agent, read from the agents\' metrics.'),
  lastRoundTime: str('When the operator last saw the round count grow.', { format: 'date-time' }),
  meanGroupSize: num('Mean size of the groups the agents averaged in.'),
  checkpoint: checkpointStatus,
  completionTime: str('When the operator saw every Ready agent report completion with its final checkpoint durable; set once, never cleared.', { format: 'date-time' }),
  failureTime: str('When the operator saw the agent and trainer restarts exceed spec.backoffLimit; set once, never cleared.', { format: 'date-time' })
})

export const swarmSchema: Schema = obj('AveragingSwarm runs a swarm of agents that repeatedly find small groups through a Kademlia DHT and average their tensors with butterfly all-reduce (Moshpit SGD).', {
  apiVersion: str('Versioned schema of this object.'),
  kind: str('REST resource this object represents.'),
  // The API server forbids anything but the type on the root metadata (it is ObjectMeta).
  metadata: { type: 'object' },
  spec: specSchema,
  status: statusSchema
}, {
  required: ['spec'],
  'x-kubernetes-validations': [{ rule: NAME_RULE.cel, message: NAME_RULE.message }]
})
