/**
 * Informers (client-node ListWatch: list, then watch from the list's resourceVersion; 410 Gone
 * relists) for swarms and every kind a swarm owns, filtered by the operator's managed-by label.
 * A ListWatch stops on any other error; we restart it with back-off. Reconciles read only these
 * caches, so a reconcile of an unchanged swarm sends no request at all.
 */
import { ListWatch, Watch, type KubeConfig, type KubernetesObject } from '@kubernetes/client-node'
import { LABEL_MANAGED_BY, LABEL_SWARM, MANAGED_BY, type KubeObj } from '../objects.js'
import type { RestClient } from './rest.js'
import { resourcePath, type Kind } from './resources.js'

export type CachedKind = 'AveragingSwarm' | 'StatefulSet' | 'Service' | 'ConfigMap' | 'Secret' | 'PodDisruptionBudget' | 'Pod' | 'PodMonitor' | 'PersistentVolumeClaim' | 'Node'

/**
 * Kinds cached whole, not only the operator's own objects: swarms; claims, because
 * spec.checkpoint.volume.claimName names a user's claim, whose appearance must reach its swarms;
 * Nodes, whose addresses exposed swarms announce (builders/reachable.ts).
 */
const UNFILTERED: readonly CachedKind[] = ['AveragingSwarm', 'PersistentVolumeClaim', 'Node']

/** Read access to the caches: what reconcile sees of the cluster. */
export interface ObjectCache {
  get (kind: CachedKind, namespace: string, name: string): KubeObj | undefined
  /** Objects of kind in namespace labeled as belonging to swarm. */
  listForSwarm (kind: CachedKind, namespace: string, swarm: string): KubeObj[]
  list (kind: CachedKind): KubeObj[]
  has (kind: CachedKind): boolean
}

export interface InformerLog { warn (obj: object, msg: string): void, info (obj: object, msg: string): void }

export const MANAGED_SELECTOR = `${LABEL_MANAGED_BY}=${MANAGED_BY}`

export class Informers implements ObjectCache {
  private readonly informers = new Map<CachedKind, ListWatch<KubernetesObject>>()
  private readonly restartDelay = new Map<CachedKind, number>()
  private stopped = false

  constructor (
    private readonly kc: KubeConfig,
    private readonly rest: RestClient,
    kinds: CachedKind[],
    private readonly onChange: (kind: CachedKind, obj: KubeObj) => void,
    private readonly log: InformerLog,
    private readonly namespace?: string
  ) {
    for (const kind of kinds) this.informers.set(kind, this.make(kind))
  }

  private make (kind: CachedKind): ListWatch<KubernetesObject> {
    const selector = UNFILTERED.includes(kind) ? undefined : MANAGED_SELECTOR
    const path = resourcePath(kind as Kind, this.namespace)
    const list = async () => withItemTypeMeta(await this.rest.request('GET', path, { query: { labelSelector: selector } }), kind)
    const lw = new ListWatch<KubernetesObject>(path, new Watch(this.kc), list, false, selector)
    for (const verb of ['add', 'update', 'delete'] as const) lw.on(verb, (o) => this.onChange(kind, o as KubeObj))
    lw.on('connect', () => { this.restartDelay.set(kind, 1000) })
    lw.on('error', (err) => {
      if (this.stopped) return
      const delay = this.restartDelay.get(kind) ?? 1000
      this.restartDelay.set(kind, Math.min(delay * 2, 30_000))
      this.log.warn({ kind, err: String(err?.message ?? err), retryInMs: delay }, 'watch failed; restarting')
      setTimeout(() => { if (!this.stopped) void lw.start() }, delay).unref()
    })
    return lw
  }

  /** Starts every informer and resolves once each has listed once (its cache is complete). */
  async start (signal?: AbortSignal): Promise<void> {
    await Promise.all([...this.informers.entries()].map(async ([kind, lw]) => {
      await lw.start()
      while (lw.latestResourceVersion() === '' && !this.stopped && signal?.aborted !== true) {
        await new Promise(resolve => setTimeout(resolve, 500))
      }
      this.log.info({ kind, objects: lw.list().length }, 'cache synced')
    }))
  }

  async stop (): Promise<void> {
    this.stopped = true
    await Promise.all([...this.informers.values()].map(async lw => await lw.stop()))
  }

  has (kind: CachedKind): boolean { return this.informers.has(kind) }

  get (kind: CachedKind, namespace: string, name: string): KubeObj | undefined {
    return this.informers.get(kind)?.get(name, namespace) as KubeObj | undefined
  }

  list (kind: CachedKind): KubeObj[] {
    return [...(this.informers.get(kind)?.list() ?? [])] as KubeObj[]
  }

  listForSwarm (kind: CachedKind, namespace: string, swarm: string): KubeObj[] {
    return ((this.informers.get(kind)?.list(namespace) ?? []) as KubeObj[]).filter(o => o.metadata.labels?.[LABEL_SWARM] === swarm)
  }
}

/**
 * A list response's items carry no apiVersion and kind (watch events do). The caches must hold
 * whole objects: drift checks compare the desired object, apiVersion and kind included, with the
 * cached one, so an item straight from a list looked drifted forever and an operator that
 * started (or relisted) with existing objects re-applied each of them on every reconcile.
 */
export function withItemTypeMeta<T extends { apiVersion?: string, items?: unknown[] }> (list: T, kind: string): T {
  for (const item of (list.items ?? []) as Array<{ apiVersion?: string, kind?: string }>) {
    item.apiVersion ??= list.apiVersion
    item.kind ??= kind
  }
  return list
}

/** The work-queue key of the swarm an object belongs to. */
export function swarmKeyOf (kind: CachedKind, obj: KubeObj): string | undefined {
  const ns = obj.metadata.namespace ?? 'default'
  if (kind === 'AveragingSwarm') return `${ns}/${obj.metadata.name}`
  const swarm = obj.metadata.labels?.[LABEL_SWARM]
  return swarm === undefined ? undefined : `${ns}/${swarm}`
}

/**
 * The work-queue keys an object's change concerns: its swarm's (by label), and for a claim also
 * every swarm in its namespace whose spec.checkpoint.volume.claimName names it (a user's claim
 * carries no swarm label; those swarms wait for it, see CheckpointsFailing ClaimNotFound).
 */
export function swarmKeysOf (kind: CachedKind, obj: KubeObj, swarms: () => KubeObj[]): string[] {
  const own = swarmKeyOf(kind, obj)
  const keys = own === undefined ? [] : [own]
  if (kind !== 'PersistentVolumeClaim') return keys
  const ns = obj.metadata.namespace ?? 'default'
  for (const s of swarms()) {
    const claim = (s as { spec?: { checkpoint?: { volume?: { claimName?: string } } } }).spec?.checkpoint?.volume?.claimName
    const key = `${s.metadata.namespace ?? 'default'}/${s.metadata.name}`
    if (claim === obj.metadata.name && (s.metadata.namespace ?? 'default') === ns && !keys.includes(key)) keys.push(key)
  }
  return keys
}
