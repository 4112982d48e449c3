/**
 * reconcile(namespace/name), level-triggered (nothing depends on which event queued the key), in
 * phases over one scope, as cluster-api and jobset reconcile:
 *
 *   expireFinished  a Complete or Failed swarm past its completionTime or failureTime + ttlSecondsAfterFinished is deleted, and that is all
 *   ensureSecrets   the identity keys (and a generated PSK), read fresh from the server before any is made
 *   checkpointStore the claim from claimTemplate, created once; or whether the named claim or S3 Secret exists
 *   applyDesired    build every desired object (pure builders), server-side apply those that drifted
 *   pruneUnwanted   delete owned objects no longer desired
 *   observe         the swarm's StatefulSets and pods from the caches → progress targets, derived status
 *   writeStatus     only when it changed, at most once per minStatusIntervalMs
 *   emitEvents      what happened on the way, after the status write
 *
 * A failure in the first three stops them and is carried in the scope: status reports it
 * (Degraded, ReconcileFailed) and reconcile throws it after the events, so the queue retries.
 */
import type { AveragingSwarm, AveragingSwarmStatus } from '../../api/v1alpha1/types.js'
import type { BuilderConfig } from '../builders/config.js'
import { buildDesired } from '../builders/desired.js'
import { exposure } from '../builders/expose.js'
import type { ReachableInputs } from '../builders/reachable.js'
import { stableJson } from '../builders/hash.js'
import { ensureIdentityKeys, type SecretData } from '../builders/identity.js'
import { LABEL_ROLE, names } from '../builders/names.js'
import { pskSecretData } from '../builders/psk.js'
import type { ClusterApi, EventInput } from '../kube/api.js'
import { ApiError } from '../kube/rest.js'
import type { CachedKind, ObjectCache } from '../kube/informers.js'
import { OWNED_KINDS, type OwnedKind } from '../kube/resources.js'
import type { KubeObj } from '../objects.js'
import { needsApply } from './drift.js'
import { statusEvents } from './events.js'
import type { ProgressTracker } from './progress.js'
import { newScope, type SwarmScope } from './scope.js'
import { agentExits, deriveStatus } from './status.js'
import { buildCheckpointClaim, checkpointClaimName } from '../builders/checkpoint-store.js'
import type { StoreProblem } from './completion.js'

export interface ReconcileLog { info (obj: object, msg: string): void, warn (obj: object, msg: string): void, debug (obj: object, msg: string): void }

export interface ReconcileResult {
  /** Writes sent (applies, deletes, status). 0 at steady state. */
  writes: number
  /** Milliseconds after which to look again (e.g. while a rollout runs), if any. */
  requeueAfterMs?: number
  status?: AveragingSwarmStatus
}

export interface ReconcilerDeps {
  cache: ObjectCache
  api: ClusterApi
  config: BuilderConfig
  progress?: ProgressTracker
  log: ReconcileLog
  /** Time for condition timestamps and the spacing of status writes; the wall clock by default. */
  clock?: () => Date
  onStatus?: (s: AveragingSwarm, status: AveragingSwarmStatus | undefined) => void
  /** Status writes of one swarm are at least this far apart; changes in between are batched. */
  minStatusIntervalMs?: number
}

const REQUEUE_WHILE_PROGRESSING_MS = 15_000
/** While the checkpoint claim or S3 Secret is missing, look again this often (a user's Secret is not watched). */
export const REQUEUE_WHILE_STORE_MISSING_MS = 30_000
/** A ttlSecondsAfterFinished far off is looked at again at least this often (a Node timer holds at most 24.8 days). */
const MAX_TTL_REQUEUE_MS = 3_600_000

/** When the swarm finished for good: completed, or failed (spec.backoffLimit). */
export function finishedAt (status: AveragingSwarmStatus | undefined): string | undefined {
  return status?.completionTime ?? status?.failureTime
}

/** Milliseconds until a finished swarm is to be deleted (≤ 0: now); undefined without a TTL or before it finished. */
export function ttlLeftMs (s: AveragingSwarm, finishedTime: string | undefined, nowMs: number): number | undefined {
  const ttl = s.spec.ttlSecondsAfterFinished
  if (ttl === undefined || finishedTime === undefined) return undefined
  return Date.parse(finishedTime) + ttl * 1000 - nowMs
}

function ownedBy (o: KubeObj, uid: string | undefined): boolean {
  return ((o.metadata.ownerReferences ?? []) as Array<{ uid: string, controller?: boolean }>).some(r => r.uid === uid && r.controller === true)
}

function describeError (e: unknown): string {
  const msg = e instanceof Error ? e.message : String(e)
  return msg.endsWith('.') ? msg : `${msg}.`
}

function must<T> (v: T | undefined, what: string): T {
  if (v === undefined) throw new Error(`reconcile phase out of order: no ${what} yet`)
  return v
}

/** How writeStatus ended: the swarm is gone (404) when it was to be written. */
type StatusOutcome = 'written' | 'unchanged' | 'deferred' | 'gone'

export class Reconciler {
  private readonly lastStatusWrite = new Map<string, number>()

  constructor (private readonly d: ReconcilerDeps) {}

  private nowMs (): number { return (this.d.clock?.() ?? new Date()).getTime() }
  private now (): string { return new Date(this.nowMs()).toISOString().replace(/\.\d+Z$/, 'Z') }

  async reconcile (key: string): Promise<ReconcileResult> {
    const [namespace, name] = key.split('/')
    const cached = this.d.cache.get('AveragingSwarm', namespace, name) as unknown as AveragingSwarm | undefined
    if (cached === undefined || cached.metadata.deletionTimestamp != null) return this.forget(key)
    const sc = newScope(key, cached)
    if ((ttlLeftMs(sc.swarm, finishedAt(sc.swarm.status), this.nowMs()) ?? 1) <= 0) return await this.expireFinished(sc)
    try {
      await this.ensureSecrets(sc)
      sc.checkpointProblem = await this.checkpointStore(sc)
      await this.applyDesired(sc)
      await this.pruneUnwanted(sc)
    } catch (e) {
      this.failed(sc, e)
    }
    this.observe(sc)
    if (await this.writeStatus(sc) === 'gone') return { writes: sc.writes } // deleted meanwhile: nothing left to report on
    await this.emitEvents(sc)
    if (sc.error !== undefined) throw new Error(sc.error)
    return this.result(sc)
  }

  /** Deleted: the garbage collector removes what it owned (owner references); forget the swarm here. */
  private forget (key: string): ReconcileResult {
    const [namespace, name] = key.split('/')
    this.d.progress?.forget(key)
    this.lastStatusWrite.delete(key)
    this.d.onStatus?.({ metadata: { name, namespace } } as AveragingSwarm, undefined)
    return { writes: 0 }
  }

  /**
   * ttlSecondsAfterFinished passed: delete the swarm (uid precondition, so a new swarm of the same
   * name is safe); the garbage collector removes what it owned. The checkpoint claim is the user's
   * and carries no owner reference, so it stays. The Event goes first, while its object exists.
   */
  private async expireFinished (sc: SwarmScope): Promise<ReconcileResult> {
    const s = sc.swarm
    const how = s.status?.completionTime !== undefined ? 'completed' : 'failed'
    const message = `Deleting the swarm: ttlSecondsAfterFinished (${String(s.spec.ttlSecondsAfterFinished)} s) passed since it ${how} at ${String(finishedAt(s.status))}.`
    try { await this.d.api.event({ swarm: s, type: 'Normal', reason: 'TTLExpired', message }) } catch (err) { this.d.log.warn({ swarm: sc.key, err: describeError(err) }, 'could not record event') }
    await this.d.api.delete({ kind: 'AveragingSwarm', namespace: sc.namespace, name: sc.name, uid: s.metadata.uid })
    this.d.log.info({ swarm: sc.key }, message)
    return { writes: 1 }
  }

  private async ensureSecrets (sc: SwarmScope): Promise<void> {
    sc.secrets = { identity: await this.identityData(sc.swarm), psk: await this.pskData(sc.swarm) }
  }

  /**
   * The checkpoint store. A claimTemplate's claim is created once (POST, so an existing claim of
   * that name, ours or a person's, is never changed; it gets no owner reference, so deleting the
   * swarm leaves it). A named claim is looked up in the claim cache, the S3 Secret on the server
   * (the user's Secrets are not cached). What is missing is returned, not thrown: the pods are then
   * built without checkpoints, so they still start and average, and CheckpointsFailing says why.
   */
  private async checkpointStore (sc: SwarmScope): Promise<StoreProblem | undefined> {
    const cp = sc.swarm.spec.checkpoint
    if (cp === undefined) return undefined
    const claim = checkpointClaimName(sc.swarm)
    if (cp.volume?.claimTemplate !== undefined && claim !== undefined) {
      if (this.d.cache.get('PersistentVolumeClaim', sc.namespace, claim) !== undefined) return undefined
      if (await this.d.api.get({ kind: 'PersistentVolumeClaim', namespace: sc.namespace, name: claim }) !== undefined) return undefined
      if (await this.d.api.create(must(buildCheckpointClaim(sc.swarm), 'claim'))) {
        sc.writes++
        sc.events.push({ swarm: sc.swarm, type: 'Normal', reason: 'Created', message: `Created PersistentVolumeClaim ${claim} from spec.checkpoint.volume.claimTemplate; it has no owner, so deleting the swarm leaves it and its checkpoints.` })
      }
      return undefined
    }
    if (claim !== undefined) {
      // Without a claim cache (a test's) the claim cannot be looked up; the pods then show it.
      if (!this.d.cache.has('PersistentVolumeClaim') || this.d.cache.get('PersistentVolumeClaim', sc.namespace, claim) !== undefined) return undefined
      return { reason: 'ClaimNotFound', message: `PersistentVolumeClaim ${claim} (spec.checkpoint.volume.claimName) does not exist in namespace ${sc.namespace}; the agents average without checkpoints until it does.` }
    }
    const s3 = cp.s3
    if (s3 === undefined) return undefined
    const ref = s3.secretRef
    const secret = await this.d.api.get({ kind: 'Secret', namespace: sc.namespace, name: ref.name })
    if (secret === undefined) return { reason: 'SecretNotFound', message: `Secret ${ref.name} (spec.checkpoint.s3.secretRef) does not exist in namespace ${sc.namespace}; the agents average without checkpoints until it does.` }
    const data = { ...(secret.data as Record<string, string> | undefined), ...(secret.stringData as Record<string, string> | undefined) }
    const missing = [ref.accessKeyIdKey, ref.secretAccessKeyKey].filter(k => data[k] === undefined)
    if (missing.length > 0) return { reason: 'SecretKeyNotFound', message: `Secret ${ref.name} (spec.checkpoint.s3.secretRef) has no key ${missing.join(' and no key ')}; the agents average without checkpoints until it does.` }
    return undefined
  }

  private async applyDesired (sc: SwarmScope): Promise<void> {
    const secrets = must(sc.secrets, 'secrets')
    const desired = buildDesired(sc.swarm, { config: this.d.config, identityData: secrets.identity, podMonitorAvailable: this.d.cache.has('PodMonitor'), pskData: secrets.psk, checkpointStoreMissing: sc.checkpointProblem !== undefined, observed: this.observedForExposure(sc) })
    sc.desired = desired
    sc.bootstrapPeers = [...desired.bootstrapPeers]
    for (const obj of desired.objects) {
      const observed = this.d.cache.get(obj.kind as CachedKind, sc.namespace, obj.metadata.name)
      if (!needsApply(obj, observed)) continue
      await this.d.api.apply(obj)
      sc.writes++
      if (observed === undefined) sc.events.push({ swarm: sc.swarm, type: 'Normal', reason: 'Created', message: `Created ${obj.kind} ${obj.metadata.name}.` })
      else if (obj.kind === 'StatefulSet') sc.events.push(...scaleEvents(sc.swarm, obj, observed))
      this.d.log.debug({ swarm: sc.key, kind: obj.kind, name: obj.metadata.name }, observed === undefined ? 'created' : 'updated')
    }
  }

  /** What the addresses of an exposed swarm are derived from (builders/reachable.ts); nothing for the others. */
  private observedForExposure (sc: SwarmScope): ReachableInputs | undefined {
    if (exposure(sc.swarm) === undefined) return undefined
    const byName = (objs: KubeObj[]) => new Map(objs.map(o => [o.metadata.name, o]))
    const pods = this.d.cache.listForSwarm('Pod', sc.namespace, sc.name)
    const nodeNames = new Set(pods.map(p => (p as any).spec?.nodeName).filter((n): n is string => typeof n === 'string'))
    const nodes = [...nodeNames].map(n => this.d.cache.get('Node', '', n)).filter((n): n is KubeObj => n !== undefined)
    return { pods: byName(pods), nodes: byName(nodes), services: byName(this.d.cache.listForSwarm('Service', sc.namespace, sc.name)) }
  }

  private async pruneUnwanted (sc: SwarmScope): Promise<void> {
    const want = new Set(must(sc.desired, 'desired state').objects.map(o => `${o.kind}/${o.metadata.name}`))
    for (const kind of OWNED_KINDS) {
      if (!this.d.cache.has(kind)) continue
      for (const o of this.d.cache.listForSwarm(kind, sc.namespace, sc.name)) {
        if (want.has(`${kind}/${o.metadata.name}`) || !ownedBy(o, sc.swarm.metadata.uid)) continue
        await this.d.api.delete({ kind: kind as OwnedKind, namespace: sc.namespace, name: o.metadata.name, uid: o.metadata.uid as string | undefined })
        sc.writes++
        sc.events.push({ swarm: sc.swarm, type: 'Normal', reason: 'Deleted', message: `Deleted ${kind} ${o.metadata.name}, no longer wanted.` })
      }
    }
  }

  private failed (sc: SwarmScope, e: unknown): void {
    sc.error = describeError(e)
    // One Event per distinct failure, not one per retry.
    if (sc.swarm.status?.conditions?.find(c => c.type === 'Degraded')?.message !== sc.error) sc.events.push({ swarm: sc.swarm, type: 'Warning', reason: 'ReconcileFailed', message: sc.error })
  }

  private observe (sc: SwarmScope): void {
    const s = sc.swarm
    sc.pods = this.d.cache.listForSwarm('Pod', sc.namespace, sc.name).filter(p => ownedByOurSets(p, sc.name))
    sc.statefulSets = this.d.cache.listForSwarm('StatefulSet', sc.namespace, sc.name)
    this.d.progress?.setTargets(sc.key, sc.pods.filter(p => isReady(p) && p.metadata.deletionTimestamp == null).flatMap(p => {
      const ip = (p as any).status?.podIP
      return ip === undefined || (p.metadata.labels?.[LABEL_ROLE] === 'auxiliary') ? [] : [{ ip, port: s.spec.metrics.port, id: String(p.metadata.uid ?? p.metadata.name) }]
    }))
    sc.status = deriveStatus(s, { statefulSets: sc.statefulSets, pods: sc.pods, progress: this.d.progress?.get(sc.key), bootstrapPeers: sc.bootstrapPeers, reconcileError: sc.error, checkpointProblem: sc.checkpointProblem }, this.now())
  }

  private async writeStatus (sc: SwarmScope): Promise<StatusOutcome> {
    const s = sc.swarm
    const status = must(sc.status, 'status')
    if (stableJson(status) === stableJson(s.status ?? {})) {
      this.d.onStatus?.(s, status)
      return 'unchanged'
    }
    // While 1000 pods turn Ready one by one, write their count once a second, not once a pod.
    const wait = (this.lastStatusWrite.get(sc.key) ?? 0) + (this.d.minStatusIntervalMs ?? 1000) - this.nowMs()
    if (wait > 0 && sc.error === undefined) {
      sc.statusDeferredMs = wait
      return 'deferred'
    }
    this.lastStatusWrite.set(sc.key, this.nowMs())
    this.d.log.debug({ swarm: sc.key, changed: changedKeys(s.status ?? {}, status) }, 'writing status')
    try {
      await this.d.api.applyStatus(s, status)
      sc.writes++
    } catch (e) {
      if (e instanceof ApiError && e.code === 404) return 'gone'
      throw e
    }
    sc.events.push(...statusEvents(s, s.status, status, agentExits(sc.pods)))
    this.d.onStatus?.(s, status)
    return 'written'
  }

  /** Events are best effort: one that cannot be recorded is logged, the reconcile goes on. */
  private async emitEvents (sc: SwarmScope): Promise<void> {
    for (const e of sc.events) {
      try { await this.d.api.event(e) } catch (err) { this.d.log.warn({ swarm: sc.key, reason: e.reason, err: describeError(err) }, 'could not record event') }
    }
  }

  private result (sc: SwarmScope): ReconcileResult {
    const status = must(sc.status, 'status')
    const progressing = status.conditions?.find(c => c.type === 'Progressing')?.status === 'True'
    const ttl = ttlLeftMs(sc.swarm, finishedAt(status), this.nowMs())
    const after = [
      sc.statusDeferredMs ?? (progressing ? REQUEUE_WHILE_PROGRESSING_MS : undefined),
      sc.checkpointProblem === undefined ? undefined : REQUEUE_WHILE_STORE_MISSING_MS,
      ttl === undefined ? undefined : Math.min(Math.max(ttl, 0), MAX_TTL_REQUEUE_MS)
    ].filter(ms => ms !== undefined)
    return { writes: sc.writes, status, ...(after.length === 0 ? {} : { requeueAfterMs: Math.min(...after) }) }
  }

  /** Keys of the bootstrap agents; read fresh from the server before generating, never from a stale cache. */
  private async identityData (s: AveragingSwarm): Promise<SecretData> {
    const ns = s.metadata.namespace ?? 'default'
    const name = names.identitySecret(s)
    const n = s.spec.bootstrap.replicas
    const cached = this.d.cache.get('Secret', ns, name)?.data as SecretData | undefined
    const complete = (d?: SecretData) => d !== undefined && Array.from({ length: n }, (_, i) => names.identityKey(i)).every(k => d[k] !== undefined)
    if (complete(cached)) return cached!
    const fresh = (await this.d.api.get({ kind: 'Secret', namespace: ns, name }))?.data as SecretData | undefined
    return await ensureIdentityKeys(fresh, n)
  }

  /** Data of the PSK Secret to create when the spec asks to generate one; undefined leaves a user's Secret alone. */
  private async pskData (s: AveragingSwarm): Promise<SecretData | undefined> {
    const ref = s.spec.network.privateNetworkSecret
    if (ref?.generate !== true) return undefined
    const ns = s.metadata.namespace ?? 'default'
    const cached = this.d.cache.get('Secret', ns, ref.name)
    if (cached !== undefined && ownedBy(cached, s.metadata.uid)) return pskSecretData(s, cached.data as SecretData)
    const fresh = await this.d.api.get({ kind: 'Secret', namespace: ns, name: ref.name })
    if (fresh !== undefined && !ownedBy(fresh, s.metadata.uid)) return undefined
    return pskSecretData(s, fresh?.data as SecretData | undefined)
  }
}

/** Top-level status fields (and condition types) that differ, for the debug log. */
function changedKeys (a: AveragingSwarmStatus, b: AveragingSwarmStatus): string[] {
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]) as Set<keyof AveragingSwarmStatus>
  const out: string[] = []
  for (const k of keys) {
    if (k === 'conditions') {
      for (const c of b.conditions ?? []) if (stableJson(c) !== stableJson(a.conditions?.find(x => x.type === c.type))) out.push(`conditions.${c.type}`)
    } else if (stableJson(a[k]) !== stableJson(b[k])) out.push(k)
  }
  return out
}

function isReady (p: KubeObj): boolean {
  return ((p as any).status?.conditions ?? []).some((c: any) => c.type === 'Ready' && c.status === 'True')
}

/** Pods labeled for this swarm that one of its StatefulSets made (not a user's look-alike). */
function ownedByOurSets (p: KubeObj, swarm: string): boolean {
  return ((p.metadata.ownerReferences ?? []) as Array<{ kind: string, name: string }>).some(r => r.kind === 'StatefulSet' && r.name.startsWith(`${swarm}-`))
}

function scaleEvents (s: AveragingSwarm, desired: KubeObj, observed: KubeObj): EventInput[] {
  const from = (observed as any).spec?.replicas
  const to = (desired as any).spec?.replicas
  if (from === undefined || from === to) return []
  return [{ swarm: s, type: 'Normal', reason: 'Scaled', message: `Scaled ${desired.metadata.name} from ${from} to ${to}.` }]
}
