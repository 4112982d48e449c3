/**
 * reconcile(namespace/name): read the swarm and its objects from the caches, build the desired
 * objects, apply only those that drifted (server-side apply, one field manager), prune owned
 * objects no longer desired, derive status and write it only when it changed. Level-triggered:
 * nothing depends on which event queued the key.
 */
import { withDefaults } from '../../api/v1alpha1/defaults.js'
import type { AveragingSwarm, AveragingSwarmStatus } from '../../api/v1alpha1/types.js'
import type { BuilderConfig } from '../builders/config.js'
import { buildDesired, type KubeObj } from '../builders/desired.js'
import { stableJson } from '../builders/hash.js'
import { ensureIdentityKeys, type SecretData } from '../builders/identity.js'
import { LABEL_ROLE, names } from '../builders/names.js'
import { pskSecretData } from '../builders/psk.js'
import type { ClusterApi, EventInput } from '../kube/api.js'
import { ApiError } from '../kube/rest.js'
import type { CachedKind, ObjectCache } from '../kube/informers.js'
import { OWNED_KINDS, type OwnedKind } from '../kube/resources.js'
import { needsApply } from './drift.js'
import { statusEvents } from './events.js'
import type { ProgressTracker } from './progress.js'
import { agentExits, deriveStatus } from './status.js'

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
  clock?: () => Date
  onStatus?: (s: AveragingSwarm, status: AveragingSwarmStatus | undefined) => void
  /** Status writes of one swarm are at least this far apart; changes in between are batched. */
  minStatusIntervalMs?: number
}

const REQUEUE_WHILE_PROGRESSING_MS = 15_000

function ownedBy (o: KubeObj, uid: string | undefined): boolean {
  return ((o.metadata.ownerReferences ?? []) as Array<{ uid: string, controller?: boolean }>).some(r => r.uid === uid && r.controller === true)
}

function describeError (e: unknown): string {
  const msg = e instanceof Error ? e.message : String(e)
  return msg.endsWith('.') ? msg : `${msg}.`
}

export class Reconciler {
  private readonly lastStatusWrite = new Map<string, number>()

  constructor (private readonly d: ReconcilerDeps) {}

  private nowMs (): number { return (this.d.clock?.() ?? new Date()).getTime() }
  private now (): string { return new Date(this.nowMs()).toISOString().replace(/\.\d+Z$/, 'Z') }

  async reconcile (key: string): Promise<ReconcileResult> {
    const [namespace, name] = key.split('/')
    const cached = this.d.cache.get('AveragingSwarm', namespace, name) as unknown as AveragingSwarm | undefined
    if (cached === undefined || cached.metadata.deletionTimestamp != null) {
      // Deleted: the garbage collector removes what it owned (owner references).
      this.d.progress?.forget(key)
      this.lastStatusWrite.delete(key)
      this.d.onStatus?.({ metadata: { name, namespace } } as AveragingSwarm, undefined)
      return { writes: 0 }
    }
    const s: AveragingSwarm = { ...cached, spec: withDefaults(cached.spec as never) }
    let writes = 0
    const events: EventInput[] = []
    let reconcileError: string | undefined
    let bootstrapPeers: string[] = s.status?.bootstrapPeers ?? []

    try {
      const identityData = await this.identityData(s)
      const pskData = await this.pskData(s)
      const desired = buildDesired(s, { config: this.d.config, identityData, podMonitorAvailable: this.d.cache.has('PodMonitor'), pskData })
      bootstrapPeers = [...desired.bootstrapPeers]
      for (const obj of desired.objects) {
        const observed = this.d.cache.get(obj.kind as CachedKind, namespace, obj.metadata.name)
        if (!needsApply(obj, observed)) continue
        await this.d.api.apply(obj)
        writes++
        if (observed === undefined) events.push({ swarm: s, type: 'Normal', reason: 'Created', message: `Created ${obj.kind} ${obj.metadata.name}.` })
        else if (obj.kind === 'StatefulSet') events.push(...scaleEvents(s, obj, observed))
        this.d.log.debug({ swarm: key, kind: obj.kind, name: obj.metadata.name }, observed === undefined ? 'created' : 'updated')
      }
      const want = new Set(desired.objects.map(o => `${o.kind}/${o.metadata.name}`))
      for (const kind of OWNED_KINDS) {
        if (!this.d.cache.has(kind)) continue
        for (const o of this.d.cache.listForSwarm(kind, namespace, name)) {
          if (want.has(`${kind}/${o.metadata.name}`) || !ownedBy(o, s.metadata.uid)) continue
          await this.d.api.delete({ kind: kind as OwnedKind, namespace, name: o.metadata.name, uid: o.metadata.uid as string | undefined })
          writes++
          events.push({ swarm: s, type: 'Normal', reason: 'Deleted', message: `Deleted ${kind} ${o.metadata.name}, no longer wanted.` })
        }
      }
    } catch (e) {
      reconcileError = describeError(e)
      // One Event per distinct failure, not one per retry.
      if (s.status?.conditions?.find(c => c.type === 'Degraded')?.message !== reconcileError) events.push({ swarm: s, type: 'Warning', reason: 'ReconcileFailed', message: reconcileError })
    }

    const pods = this.d.cache.listForSwarm('Pod', namespace, name).filter(p => ownedByOurSets(p, name))
    const statefulSets = this.d.cache.listForSwarm('StatefulSet', namespace, name)
    this.d.progress?.setTargets(key, pods.filter(p => isReady(p) && p.metadata.deletionTimestamp == null).flatMap(p => {
      const ip = (p as any).status?.podIP
      return ip === undefined || (p.metadata.labels?.[LABEL_ROLE] === 'auxiliary') ? [] : [{ ip, port: s.spec.metrics.port }]
    }))
    const status = deriveStatus(s, { statefulSets, pods, progress: this.d.progress?.get(key), bootstrapPeers, reconcileError }, this.now())
    let deferMs: number | undefined
    if (stableJson(status) !== stableJson(s.status ?? {})) {
      // While 1000 pods turn Ready one by one, write their count once a second, not once a pod.
      const wait = (this.lastStatusWrite.get(key) ?? 0) + (this.d.minStatusIntervalMs ?? 1000) - this.nowMs()
      if (wait > 0 && reconcileError === undefined) {
        deferMs = wait
      } else {
        this.lastStatusWrite.set(key, this.nowMs())
        this.d.log.debug({ swarm: key, changed: changedKeys(s.status ?? {}, status) }, 'writing status')
        try {
          await this.d.api.applyStatus(s, status)
          writes++
        } catch (e) {
          if (e instanceof ApiError && e.code === 404) return { writes } // deleted meanwhile: nothing left to report on
          throw e
        }
        events.push(...statusEvents(s, s.status, status, agentExits(pods)))
        this.d.onStatus?.(s, status)
      }
    } else this.d.onStatus?.(s, status)
    for (const e of events) {
      try { await this.d.api.event(e) } catch (err) { this.d.log.warn({ swarm: key, reason: e.reason, err: describeError(err) }, 'could not record event') }
    }
    if (reconcileError !== undefined) throw new Error(reconcileError)
    if (deferMs !== undefined) return { writes, status, requeueAfterMs: deferMs }
    const progressing = status.conditions?.find(c => c.type === 'Progressing')?.status === 'True'
    return { writes, status, ...(progressing ? { requeueAfterMs: REQUEUE_WHILE_PROGRESSING_MS } : {}) }
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
