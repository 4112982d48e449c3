/**
 * The agent pod template shared by the bootstrap, regular and auxiliary StatefulSets. The agent
 * is configured only through the environment contract of api/agent-env.ts. Pods pass Pod
 * Security "restricted": non-root uid 65532, no privilege escalation, no capabilities,
 * RuntimeDefault seccomp, read-only root filesystem with an emptyDir on /tmp.
 */
import { AGENT_ENV } from '../../api/agent-env.js'
import { DEFAULT_REACHABILITY, DEFAULT_RELAY_SERVE } from '../../api/relay-parameters.js'
import type { AveragingSwarm, KubeObject, ResourceRequirements } from '../../api/v1alpha1/types.js'
import type { BuilderConfig } from './config.js'
import { CHECKPOINT_MOUNT_DIR } from '../../api/checkpoint-parameters.js'
import { CONFIG_KEYS, configData, SECTION_KEYS } from './configmap.js'
import { checkpointClaimName, s3Env } from './checkpoint-store.js'
import { ANNOTATION_CONFIG_HASH, names, ownedLabels, roleSelector, type Role } from './names.js'
import { ANNOUNCE_MOUNT_DIR, ANNOUNCE_VOLUME, exposeTypeOf, exposure } from './expose.js'
import { MEMBERS_MOUNT_DIR, MEMBERS_VOLUME, followsGrid } from './members.js'

export const AGENT_CONTAINER = 'agent'
export const TRAINER_CONTAINER = 'trainer'
export const PSK_MOUNT_DIR = '/etc/averaging-swarm/psk'
/** The memory-backed folder agent and trainer share tensor regions through (docs/trainer-api.md). */
export const SHM_VOLUME = 'avs-shm'
export const SHM_MOUNT_DIR = '/var/run/avs/shm'
/** spec.checkpoint.volume, mounted at CHECKPOINT_MOUNT_DIR (AVS_CHECKPOINT_DIR) in the agent container. */
export const CHECKPOINT_VOLUME = 'avs-checkpoints'
const PSK_FILE = 'swarm.key'
const UID = 65532

export interface EnvVar { name: string, value?: string, valueFrom?: KubeObject }

export interface PodInputs {
  role: Role
  /** Index of the bootstrap agent this template is for (role bootstrap only). */
  bootstrapIndex?: number
  /** Multiaddrs this agent dials first (its own excluded). */
  bootstrapPeers: string[]
  /** Hash of everything the pods read indirectly (ConfigMap data, PSK reference): a change rolls them. */
  configHash: string
  config: BuilderConfig
  /**
   * The checkpoint store is not there yet (the named claim, or the S3 Secret or its keys, do not
   * exist): the pods are built without it, so they start and average, and CheckpointsFailing says
   * why. Once it exists the template gains it and the pods roll.
   */
  checkpointStoreMissing?: boolean
}

const field = (name: string, fieldPath: string): EnvVar => ({ name, valueFrom: { fieldRef: { fieldPath } } })
const value = (name: string, v: string | number): EnvVar => ({ name, value: String(v) })

export const CONTAINER_SECURITY_CONTEXT = {
  allowPrivilegeEscalation: false,
  readOnlyRootFilesystem: true,
  runAsNonRoot: true,
  capabilities: { drop: ['ALL'] }
}

export const POD_SECURITY_CONTEXT = {
  runAsNonRoot: true,
  runAsUser: UID,
  runAsGroup: UID,
  fsGroup: UID,
  seccompProfile: { type: 'RuntimeDefault' }
}

/** The agent's environment, in the order a person reads it in kubectl describe. */
export function agentEnv (s: AveragingSwarm, p: PodInputs): EnvVar[] {
  const env: EnvVar[] = [
    value(AGENT_ENV.swarm.name, s.metadata.name),
    field(AGENT_ENV.namespace.name, 'metadata.namespace'),
    field(AGENT_ENV.podName.name, 'metadata.name'),
    field(AGENT_ENV.podIP.name, 'status.podIP'),
    value(AGENT_ENV.mode.name, p.role === 'auxiliary' ? 'auxiliary' : 'node'),
    value(AGENT_ENV.p2pPort.name, s.spec.network.port),
    value(AGENT_ENV.metricsPort.name, s.spec.metrics.port)
  ]
  if (p.role === 'bootstrap') {
    env.push({ name: AGENT_ENV.identityKey.name, valueFrom: { secretKeyRef: { name: names.identitySecret(s), key: names.identityKey(p.bootstrapIndex ?? 0) } } })
  }
  if (p.bootstrapPeers.length > 0) env.push(value(AGENT_ENV.bootstrapPeers.name, p.bootstrapPeers.join(',')))
  const e = exposure(s)
  if (e !== undefined) {
    // A fixed data port: a node port, host port or load balancer forwards a port known in advance.
    env.push(value(AGENT_ENV.dataPort.name, e.dataPort))
    // $(AVS_POD_NAME) is expanded by the kubelet: one StatefulSet, a file per pod.
    env.push(value(AGENT_ENV.announceFile.name, `${ANNOUNCE_MOUNT_DIR}/$(${AGENT_ENV.podName.name})`))
  }
  if (followsGrid(s, p.role)) env.push(value(AGENT_ENV.membersDir.name, MEMBERS_MOUNT_DIR))
  env.push(...relayEnv(s, p.role))
  if (p.config.agentDnsServers !== undefined) env.push(value(AGENT_ENV.dnsServers.name, p.config.agentDnsServers))
  if (s.spec.network.privateNetworkSecret !== undefined) env.push(value(AGENT_ENV.pskFile.name, `${PSK_MOUNT_DIR}/${PSK_FILE}`))
  const data = configData(s)
  for (const k of CONFIG_KEYS) {
    const name = AGENT_ENV[k].name
    if (SECTION_KEYS.includes(k) && data[name] === undefined) continue
    env.push({ name, valueFrom: { configMapKeyRef: { name: names.configMap(s), key: name, ...(k === 'bandwidth' ? { optional: true } : {}) } } })
  }
  if (writesCheckpoints(s, p)) {
    const s3 = s.spec.checkpoint?.s3
    if (s3 !== undefined) env.push(...s3Env(s3)); else env.push(value(AGENT_ENV.checkpointDir.name, CHECKPOINT_MOUNT_DIR))
    const from = s.spec.restoreFrom
    if (from !== undefined) env.push(value(AGENT_ENV.restoreFromSwarm.name, from.swarm), ...(from.round === undefined ? [] : [value(AGENT_ENV.restoreFromRound.name, from.round)]))
  }
  // Every role ends its run with its pod's trainer (auxiliary agents stop with the rest).
  if (s.spec.completion?.onTrainerExit === true) env.push(value(AGENT_ENV.completionOnTrainerExit.name, 'true'))
  env.push(value(AGENT_ENV.workload.name, s.spec.workload.type))
  if (s.spec.workload.type === 'sidecar') env.push(value(AGENT_ENV.sidecarPort.name, s.spec.workload.sidecarPort), value(AGENT_ENV.shmDir.name, SHM_MOUNT_DIR))
  env.push(value(AGENT_ENV.logLevel.name, s.spec.logLevel))
  // The kill comes this long after SIGTERM: a round still running just before it hands its span off.
  // Absent when the spec leaves the grace period to Kubernetes (30 s, the agent's default), so existing swarms do not roll.
  const grace = s.spec.podTemplate?.terminationGracePeriodSeconds
  if (grace !== undefined) env.push(value(AGENT_ENV.terminationGrace.name, grace))
  // User variables come last and cannot shadow the contract's variables.
  const ours = new Set(env.map(e => e.name))
  for (const e of (s.spec.podTemplate?.env ?? []) as unknown as EnvVar[]) if (!ours.has(e.name)) env.push(e)
  return env
}

/**
 * Whether this role's pods get the checkpoint store (the volume and AVS_CHECKPOINT_DIR, or the
 * AVS_CHECKPOINT_S3_* variables and credentials) and spec.restoreFrom: bootstrap and regular
 * agents, which hold the model (weight > 0). Auxiliary agents do not: with weight 0 they only lend
 * the reduction their CPU, their values are never the result a user takes home, and they often
 * run on CPU nodes that may not reach a claim bound where the GPU nodes are. They still get
 * AVS_COMPLETION_ROUNDS (through the ConfigMap) and stop with the rest. No role gets a store
 * that does not exist yet (checkpointStoreMissing).
 */
export function writesCheckpoints (s: AveragingSwarm, p: Pick<PodInputs, 'role' | 'checkpointStoreMissing'>): boolean {
  return s.spec.checkpoint !== undefined && p.role !== 'auxiliary' && p.checkpointStoreMissing !== true
}

/**
 * spec.network.relay and .reachability as the agent's AVS_RELAY* and AVS_REACHABILITY: bootstrap
 * agents relay for members by default (absent section), regular ones too with serve All; auxiliary
 * agents never (CPU-only helpers, often on nodes members cannot reach). reachability auto is the
 * agent's own default and is left out.
 */
export function relayEnv (s: AveragingSwarm, role: Role): EnvVar[] {
  const r = s.spec.network.relay
  const serve = r?.serve ?? DEFAULT_RELAY_SERVE
  const serving = role !== 'auxiliary' && (serve === 'All' || (serve === 'Bootstrap' && role === 'bootstrap'))
  const env: EnvVar[] = []
  if (serving) {
    env.push(value(AGENT_ENV.relay.name, 'serve'))
    if (r !== undefined) {
      env.push(value(AGENT_ENV.relayMaxReservations.name, r.maxReservations), value(AGENT_ENV.relayCircuitMiB.name, r.circuitMiB), value(AGENT_ENV.relayCircuitDuration.name, r.circuitDuration))
    }
  }
  const reach = s.spec.network.reachability ?? DEFAULT_REACHABILITY
  if (reach !== DEFAULT_REACHABILITY) env.push(value(AGENT_ENV.reachability.name, reach))
  return env
}

/** Auxiliary agents are CPU-only: any GPU-like extended resource is removed. */
function withoutGpus (r: ResourceRequirements | undefined): ResourceRequirements | undefined {
  if (r === undefined) return undefined
  const strip = (m?: Record<string, string | number>) => m === undefined ? undefined : Object.fromEntries(Object.entries(m).filter(([k]) => !/gpu/i.test(k)))
  return { ...(r.limits === undefined ? {} : { limits: strip(r.limits) }), ...(r.requests === undefined ? {} : { requests: strip(r.requests) }) }
}

function probe (path: string, periodSeconds: number, failureThreshold: number) {
  return { httpGet: { path, port: 'metrics' }, periodSeconds, failureThreshold, timeoutSeconds: 2 }
}

function agentContainer (s: AveragingSwarm, p: PodInputs) {
  const resources = p.role === 'auxiliary' ? withoutGpus(s.spec.auxiliary.resources) : s.spec.resources
  const mounts: KubeObject[] = [{ name: 'tmp', mountPath: '/tmp' }]
  if (s.spec.network.privateNetworkSecret !== undefined) mounts.push({ name: 'psk', mountPath: PSK_MOUNT_DIR, readOnly: true })
  if (s.spec.workload.type === 'sidecar') mounts.push({ name: SHM_VOLUME, mountPath: SHM_MOUNT_DIR })
  if (writesCheckpoints(s, p) && checkpointClaimName(s) !== undefined) mounts.push({ name: CHECKPOINT_VOLUME, mountPath: CHECKPOINT_MOUNT_DIR })
  const e = exposure(s)
  if (e !== undefined) mounts.push({ name: ANNOUNCE_VOLUME, mountPath: ANNOUNCE_MOUNT_DIR, readOnly: true })
  if (followsGrid(s, p.role)) mounts.push({ name: MEMBERS_VOLUME, mountPath: MEMBERS_MOUNT_DIR, readOnly: true })
  // HostPort: the node forwards its own ports to the agent (and the scheduler keeps two agents of the swarm off one node).
  const host = exposeTypeOf(s, p.role) === 'HostPort'
  const ports: KubeObject[] = [
    { name: 'p2p', containerPort: s.spec.network.port, protocol: 'TCP', ...(host ? { hostPort: s.spec.network.port } : {}) },
    { name: 'metrics', containerPort: s.spec.metrics.port, protocol: 'TCP' }
  ]
  if (e !== undefined) ports.push({ name: 'data', containerPort: e.dataPort, protocol: 'TCP', ...(host ? { hostPort: e.dataPort } : {}) })
  return {
    name: AGENT_CONTAINER,
    image: s.spec.image ?? p.config.defaultImage,
    imagePullPolicy: s.spec.imagePullPolicy ?? 'IfNotPresent',
    ...(p.config.agentCommand === undefined ? {} : { command: p.config.agentCommand }),
    env: agentEnv(s, p),
    ports,
    readinessProbe: probe('/readyz', 5, 3),
    livenessProbe: { ...probe('/healthz', 10, 6), initialDelaySeconds: 10 },
    ...(resources === undefined ? {} : { resources }),
    securityContext: CONTAINER_SECURITY_CONTEXT,
    // The agent's last stderr line ("agent configuration is invalid: ...") becomes the termination
    // message, which the operator shows in the swarm's Degraded condition and an AgentExits event.
    terminationMessagePolicy: 'FallbackToLogsOnError',
    volumeMounts: mounts
  }
}

function trainerContainer (s: AveragingSwarm) {
  const t = s.spec.workload.trainer
  if (t === undefined) return undefined
  return {
    name: TRAINER_CONTAINER,
    image: t.image,
    ...(t.imagePullPolicy === undefined ? {} : { imagePullPolicy: t.imagePullPolicy }),
    ...(t.command === undefined ? {} : { command: t.command }),
    ...(t.args === undefined ? {} : { args: t.args }),
    env: [
      value(AGENT_ENV.sidecarPort.name, s.spec.workload.sidecarPort),
      value(AGENT_ENV.shmDir.name, SHM_MOUNT_DIR),
      ...((t.env ?? []) as unknown as EnvVar[]).filter(e => e.name !== AGENT_ENV.sidecarPort.name && e.name !== AGENT_ENV.shmDir.name)
    ],
    ...(t.resources === undefined ? {} : { resources: t.resources }),
    // A crashing trainer's last log line (a Python exception's message) reaches the swarm's status as the agent's does.
    terminationMessagePolicy: 'FallbackToLogsOnError',
    securityContext: CONTAINER_SECURITY_CONTEXT,
    volumeMounts: [{ name: 'tmp', mountPath: '/tmp' }, { name: SHM_VOLUME, mountPath: SHM_MOUNT_DIR }]
  }
}

export function buildPodTemplate (s: AveragingSwarm, p: PodInputs) {
  const o = s.spec.podTemplate ?? {}
  const volumes: KubeObject[] = [{ name: 'tmp', emptyDir: {} }]
  const psk = s.spec.network.privateNetworkSecret
  if (psk !== undefined) volumes.push({ name: 'psk', secret: { secretName: psk.name, items: [{ key: psk.key, path: PSK_FILE }] } })
  // Memory-backed: regions are read and written every step; the pod's memory limit bounds them (the tensors' size is the user's).
  if (s.spec.workload.type === 'sidecar') volumes.push({ name: SHM_VOLUME, emptyDir: { medium: 'Memory' } })
  // The checkpoint claim; fsGroup 65532 (POD_SECURITY_CONTEXT) makes it writable where the volume type supports ownership management.
  const claimName = checkpointClaimName(s)
  if (claimName !== undefined && writesCheckpoints(s, p)) volumes.push({ name: CHECKPOINT_VOLUME, persistentVolumeClaim: { claimName } })
  // optional: the pod starts before the operator knows its address; the agent rereads the file.
  if (exposure(s) !== undefined) volumes.push({ name: ANNOUNCE_VOLUME, configMap: { name: names.announceConfigMap(s), optional: true } })
  // optional: until the operator wrote it the agents keep one key; they read it again every round.
  if (followsGrid(s, p.role)) volumes.push({ name: MEMBERS_VOLUME, configMap: { name: names.membersConfigMap(s), optional: true } })
  const containers: KubeObject[] = [agentContainer(s, p)]
  if (s.spec.workload.type === 'sidecar') { const t = trainerContainer(s); if (t !== undefined) containers.push(t) }
  const reserved = new Set([AGENT_CONTAINER, TRAINER_CONTAINER])
  containers.push(...(o.containers ?? []).filter(c => !reserved.has(String(c.name))))
  const reservedVolumes = new Set(['tmp', 'psk', SHM_VOLUME, CHECKPOINT_VOLUME, ANNOUNCE_VOLUME, MEMBERS_VOLUME])
  volumes.push(...(o.volumes ?? []).filter(v => !reservedVolumes.has(String(v.name))))
  const gpuPlacement = p.role !== 'auxiliary'
  return {
    metadata: {
      labels: { ...o.labels, ...ownedLabels(s), ...roleSelector(s, p.role, p.bootstrapIndex) },
      annotations: { ...o.annotations, [ANNOTATION_CONFIG_HASH]: p.configHash }
    },
    spec: {
      ...(o.serviceAccountName === undefined ? {} : { serviceAccountName: o.serviceAccountName }),
      automountServiceAccountToken: false,
      ...(o.priorityClassName === undefined ? {} : { priorityClassName: o.priorityClassName }),
      ...(o.schedulerName === undefined ? {} : { schedulerName: o.schedulerName }),
      ...(o.imagePullSecrets === undefined ? {} : { imagePullSecrets: o.imagePullSecrets }),
      ...(o.terminationGracePeriodSeconds === undefined ? {} : { terminationGracePeriodSeconds: o.terminationGracePeriodSeconds }),
      ...(gpuPlacement && s.spec.nodeSelector !== undefined ? { nodeSelector: s.spec.nodeSelector } : {}),
      ...(s.spec.tolerations === undefined ? {} : { tolerations: s.spec.tolerations }),
      ...(gpuPlacement && s.spec.affinity !== undefined ? { affinity: s.spec.affinity } : {}),
      enableServiceLinks: false,
      securityContext: POD_SECURITY_CONTEXT,
      containers,
      volumes
    }
  }
}
