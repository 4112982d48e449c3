/**
 * Default values of the AveragingSwarm spec. The CRD schema takes its `default:` keywords from
 * here, and withDefaults() applies the same values to objects that never passed the API server
 * (unit tests, the local runtime), so both paths see one set of numbers.
 */
import type { AveragingSwarmSpec, AveragingSpec, ExposeServiceSpec, ExposeSpec, RelaySpec } from './types.js'
import { DEFAULT_REACHABILITY, DEFAULT_RELAY_CIRCUIT_DURATION, DEFAULT_RELAY_SERVE, RELAY_CIRCUIT_MIB, RELAY_MAX_RESERVATIONS } from '../relay-parameters.js'
import { averagingDefaults } from './averaging-schema.js'
import { CHECKPOINT_PARAMETERS, DEFAULT_CLAIM_ACCESS_MODES, DEFAULT_POD_POLICY, S3_PATH_STYLE_DEFAULT, S3_REGION, S3_SECRET_KEYS } from '../checkpoint-parameters.js'
import type { CheckpointS3, CheckpointSpec, ClaimTemplate } from './types.js'

/** Defaults of the averaging parameters, from their table (api/averaging-parameters.ts). */
export const DEFAULT_AVERAGING = averagingDefaults() as Readonly<Omit<AveragingSpec, 'prefix' | 'bandwidth'>>

export const DEFAULTS = {
  replicas: 1,
  imagePullPolicy: 'IfNotPresent',
  bootstrapReplicas: 1,
  auxiliaryReplicas: 0,
  p2pPort: 31337,
  /** The direct data channel's fixed port once agents are exposed (AVS_DATA_PORT); unexposed pods pick a free one. */
  dataPort: 31338,
  metricsPort: 9400,
  sidecarPort: 9401,
  workloadType: 'builtin',
  podMonitor: true,
  logLevel: 'info',
  pskKey: 'swarm.key'
} as const

/** Input accepted by withDefaults: a spec whose defaulted fields may be missing. */
export type PartialSpec = Partial<Omit<AveragingSwarmSpec, 'averaging' | 'bootstrap' | 'auxiliary' | 'network' | 'workload' | 'metrics' | 'checkpoint' | 'completion'>> & {
  averaging?: Partial<AveragingSpec>
  bootstrap?: Partial<AveragingSwarmSpec['bootstrap']>
  auxiliary?: Partial<AveragingSwarmSpec['auxiliary']>
  network?: Partial<Omit<AveragingSwarmSpec['network'], 'privateNetworkSecret' | 'expose' | 'relay'>> & {
    privateNetworkSecret?: { name: string, key?: string, generate?: boolean }
    expose?: Partial<Omit<ExposeSpec, 'service'>> & { service?: Partial<ExposeServiceSpec> }
    relay?: Partial<RelaySpec>
  }
  workload?: Partial<AveragingSwarmSpec['workload']>
  metrics?: Partial<AveragingSwarmSpec['metrics']>
  checkpoint?: Partial<Omit<CheckpointSpec, 'volume' | 's3'>> & {
    volume?: { claimName?: string, claimTemplate?: Partial<ClaimTemplate> & { size: string } }
    s3?: Partial<Omit<CheckpointS3, 'secretRef'>> & { bucket: string, secretRef: Partial<CheckpointS3['secretRef']> & { name: string } }
  }
  completion?: Partial<NonNullable<AveragingSwarmSpec['completion']>>
}

/** spec.checkpoint with its nested defaults (claimTemplate.accessModes, the s3 section's), as the API server fills them. */
function checkpointWithDefaults (c: NonNullable<PartialSpec['checkpoint']>): CheckpointSpec {
  const { volume, s3, ...rest } = c
  const out: CheckpointSpec = { every: CHECKPOINT_PARAMETERS.every.default, keep: CHECKPOINT_PARAMETERS.keep.default, ...rest }
  if (volume !== undefined) {
    const t = volume.claimTemplate
    out.volume = { ...volume, claimTemplate: t === undefined ? undefined : { ...t, accessModes: t.accessModes ?? [...DEFAULT_CLAIM_ACCESS_MODES] } }
    if (t === undefined) delete out.volume.claimTemplate
  }
  if (s3 !== undefined) {
    out.s3 = {
      region: S3_REGION.default,
      forcePathStyle: S3_PATH_STYLE_DEFAULT,
      ...s3,
      secretRef: { accessKeyIdKey: S3_SECRET_KEYS.accessKeyId, secretAccessKeyKey: S3_SECRET_KEYS.secretAccessKey, ...s3.secretRef }
    }
  }
  return out
}

/** Fills every defaulted field the way the API server's structural defaulting does. */
export function withDefaults (spec: PartialSpec): AveragingSwarmSpec {
  const pns = spec.network?.privateNetworkSecret
  const ex = spec.network?.expose
  const { checkpoint, completion, ...rest } = spec
  return {
    ...rest,
    replicas: spec.replicas ?? DEFAULTS.replicas,
    imagePullPolicy: spec.imagePullPolicy ?? DEFAULTS.imagePullPolicy,
    averaging: { ...DEFAULT_AVERAGING, ...spec.averaging },
    bootstrap: { replicas: DEFAULTS.bootstrapReplicas, peers: [], ...spec.bootstrap },
    auxiliary: { replicas: DEFAULTS.auxiliaryReplicas, ...spec.auxiliary },
    network: {
      port: spec.network?.port ?? DEFAULTS.p2pPort,
      ...(pns === undefined ? {} : { privateNetworkSecret: { key: DEFAULTS.pskKey, generate: false, ...pns } }),
      ...(ex === undefined ? {} : { expose: withExposeDefaults(ex) }),
      ...(spec.network?.relay === undefined ? {} : { relay: { serve: DEFAULT_RELAY_SERVE, maxReservations: RELAY_MAX_RESERVATIONS.default, circuitMiB: RELAY_CIRCUIT_MIB.default, circuitDuration: DEFAULT_RELAY_CIRCUIT_DURATION, ...spec.network.relay } }),
      reachability: spec.network?.reachability ?? DEFAULT_REACHABILITY
    },
    workload: { type: DEFAULTS.workloadType, sidecarPort: DEFAULTS.sidecarPort, ...spec.workload },
    metrics: { port: DEFAULTS.metricsPort, podMonitor: DEFAULTS.podMonitor, ...spec.metrics },
    logLevel: spec.logLevel ?? DEFAULTS.logLevel,
    suspend: spec.suspend ?? false,
    // Optional sections: absent stays absent; present gets its fields' defaults, as the API server does.
    ...(checkpoint === undefined ? {} : { checkpoint: checkpointWithDefaults(checkpoint) }),
    ...(completion === undefined ? {} : { completion: { onTrainerExit: false, podPolicy: DEFAULT_POD_POLICY, ...completion } })
  }
}

/** spec.network.expose as the API server defaults it: type None, the fixed data port, Cluster traffic policy. */
function withExposeDefaults (ex: NonNullable<NonNullable<PartialSpec['network']>['expose']>): ExposeSpec {
  const { service, ...rest } = ex
  return {
    type: 'None',
    dataPort: DEFAULTS.dataPort,
    ...rest,
    ...(service === undefined ? {} : { service: { externalTrafficPolicy: 'Cluster', ...service } })
  }
}
