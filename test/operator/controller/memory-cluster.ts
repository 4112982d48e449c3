/**
 * An in-memory cluster behind the reconciler's two seams: the ObjectCache it reads (the class
 * itself; the informers in production) and the ClusterApi it writes through (`api`;
 * KubeClusterApi in production). Every call
 * through ClusterApi is recorded, in order, so a test can say "steady state sends nothing" or
 * "events come after the status write". settle() plays the StatefulSet controller and the
 * kubelet: every StatefulSet gets its pods, all Ready, and a rollout-complete status.
 */
import type { AveragingSwarm, AveragingSwarmStatus } from '../../../api/v1alpha1/types.js'
import type { KubeObj } from '../../../operator/objects.js'
import { stableJson } from '../../../operator/builders/hash.js'
import { LABEL_SWARM } from '../../../operator/objects.js'
import type { ClusterApi, EventInput, ObjectRef } from '../../../operator/kube/api.js'
import type { CachedKind, ObjectCache } from '../../../operator/kube/informers.js'

type Verb = 'apply' | 'create' | 'delete' | 'applyStatus' | 'get' | 'event'

export const CACHED: CachedKind[] = ['AveragingSwarm', 'StatefulSet', 'Service', 'ConfigMap', 'Secret', 'PodDisruptionBudget', 'Pod', 'PersistentVolumeClaim']

const clone = <T>(o: T): T => structuredClone(o)
const keyOf = (kind: string, ns: string | undefined, name: string) => `${kind}/${ns ?? 'default'}/${name}`

export class MemoryCluster implements ObjectCache {
  private readonly objects = new Map<string, KubeObj>()
  /** Calls through ClusterApi, oldest first: "apply StatefulSet/demo-agent", "applyStatus demo", "event Normal/Created", … */
  calls: string[] = []
  /** Events recorded, oldest first. */
  events: EventInput[] = []
  private readonly failures = new Map<Verb, Error>()
  private uids = 0

  /** The ClusterApi seam (its get() reads the server, where the class's get() reads the cache). */
  readonly api: ClusterApi = {
    apply: async obj => await this.apply(obj),
    create: async obj => await this.create(obj),
    delete: async ref => await this.delete(ref),
    applyStatus: async (s, st) => await this.applyStatus(s, st),
    get: async ref => await this.serverGet(ref),
    event: async e => await this.event(e)
  }

  constructor (private readonly kinds: CachedKind[] = CACHED) {}

  /** The next call of verb fails with err (once). */
  failNext (verb: Verb, err: Error): void { this.failures.set(verb, err) }

  /** Returns and forgets the calls recorded so far. */
  takeCalls (): string[] { const c = this.calls; this.calls = []; return c }
  takeEvents (): EventInput[] { const e = this.events; this.events = []; return e }

  private record (verb: Verb, what: string): void {
    this.calls.push(`${verb} ${what}`)
    const err = this.failures.get(verb)
    if (err !== undefined) { this.failures.delete(verb); throw err }
  }

  private newUid (): string { return `00000000-0000-4000-8000-${String(++this.uids).padStart(12, '0')}` }

  // --- what a user (kubectl) or another controller does, not counted as the operator's calls ---

  /** Creates or replaces an object as a client other than the operator would. */
  put (obj: KubeObj): KubeObj {
    const k = keyOf(obj.kind, obj.metadata.namespace, obj.metadata.name)
    const prev = this.objects.get(k)
    const next = clone(obj)
    next.metadata.uid ??= (prev?.metadata.uid as string | undefined) ?? this.newUid()
    this.objects.set(k, next)
    return clone(next)
  }

  remove (kind: string, namespace: string, name: string): void { this.objects.delete(keyOf(kind, namespace, name)) }

  /** The swarm's spec changes (kubectl edit): generation moves on. */
  editSwarm (namespace: string, name: string, edit: (s: AveragingSwarm) => void): void {
    const s = this.objects.get(keyOf('AveragingSwarm', namespace, name)) as unknown as AveragingSwarm
    edit(s)
    s.metadata.generation = (s.metadata.generation ?? 0) + 1
  }

  swarmStatus (namespace: string, name: string): AveragingSwarmStatus | undefined {
    return clone((this.objects.get(keyOf('AveragingSwarm', namespace, name)) as unknown as AveragingSwarm | undefined)?.status)
  }

  /** The StatefulSet controller and kubelet catch up: pods 0..replicas-1 of every set exist and are Ready; extra ones are gone. */
  settle (): void {
    const sets = [...this.objects.values()].filter(o => o.kind === 'StatefulSet' && (o.metadata.ownerReferences as unknown[] | undefined)?.length)
    for (const [k, p] of this.objects) {
      if (p.kind !== 'Pod') continue
      const owner = (p.metadata.ownerReferences as Array<{ name: string }>)[0]?.name
      const set = sets.find(s => s.metadata.name === owner && s.metadata.namespace === p.metadata.namespace) as any
      if (set === undefined || Number(p.metadata.name.slice(owner.length + 1)) >= set.spec.replicas) this.objects.delete(k)
    }
    for (const set of sets as any[]) {
      const n: number = set.spec.replicas
      for (let i = 0; i < n; i++) {
        const name = `${set.metadata.name}-${i}`
        this.put({
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name, namespace: set.metadata.namespace, labels: { ...set.spec.template.metadata.labels }, ownerReferences: [{ apiVersion: 'apps/v1', kind: 'StatefulSet', name: set.metadata.name, uid: set.metadata.uid, controller: true }] },
          status: { phase: 'Running', podIP: `10.0.0.${i + 1}`, conditions: [{ type: 'Ready', status: 'True' }] }
        })
      }
      set.status = { observedGeneration: set.metadata.generation, replicas: n, readyReplicas: n, updatedReplicas: n, currentRevision: 'r1', updateRevision: 'r1' }
    }
  }

  // --- ObjectCache: what reconcile sees ---

  has (kind: CachedKind): boolean { return this.kinds.includes(kind) }

  get (kind: CachedKind, namespace: string, name: string): KubeObj | undefined {
    if (!this.has(kind)) return undefined
    const o = this.objects.get(keyOf(kind, namespace, name))
    return o === undefined ? undefined : clone(o)
  }

  list (kind: CachedKind): KubeObj[] {
    return this.has(kind) ? [...this.objects.values()].filter(o => o.kind === kind).map(clone) : []
  }

  listForSwarm (kind: CachedKind, namespace: string, swarm: string): KubeObj[] {
    return this.list(kind).filter(o => o.metadata.namespace === namespace && o.metadata.labels?.[LABEL_SWARM] === swarm)
  }

  // --- ClusterApi: what reconcile changes ---

  /** Server-side apply, simplified: the applied object replaces spec and data; uid, generation and status stay the server's. */
  private async apply (obj: KubeObj): Promise<void> {
    this.record('apply', `${obj.kind}/${obj.metadata.name}`)
    const k = keyOf(obj.kind, obj.metadata.namespace, obj.metadata.name)
    const prev = this.objects.get(k) as any
    const next = clone(obj) as any
    next.metadata.uid = prev?.metadata.uid ?? this.newUid()
    next.metadata.generation = prev === undefined ? 1 : prev.metadata.generation + (stableJson(prev.spec ?? null) === stableJson(next.spec ?? null) ? 0 : 1)
    if (prev?.status !== undefined) next.status = prev.status
    this.objects.set(k, next)
  }

  /** POST: an existing object of the name is left as it is (409 AlreadyExists, which KubeClusterApi reports as false). */
  private async create (obj: KubeObj): Promise<boolean> {
    this.record('create', `${obj.kind}/${obj.metadata.name}`)
    const k = keyOf(obj.kind, obj.metadata.namespace, obj.metadata.name)
    if (this.objects.has(k)) return false
    const next = clone(obj)
    next.metadata.uid = this.newUid()
    this.objects.set(k, next)
    return true
  }

  private async delete (ref: ObjectRef): Promise<void> {
    this.record('delete', `${ref.kind}/${ref.name}`)
    const k = keyOf(ref.kind, ref.namespace, ref.name)
    const o = this.objects.get(k)
    if (o === undefined || (ref.uid !== undefined && o.metadata.uid !== ref.uid)) return // 404 / 409 precondition: KubeClusterApi swallows both
    this.objects.delete(k)
  }

  private async applyStatus (swarm: AveragingSwarm, status: AveragingSwarmStatus): Promise<void> {
    this.record('applyStatus', swarm.metadata.name)
    const o = this.objects.get(keyOf('AveragingSwarm', swarm.metadata.namespace, swarm.metadata.name))
    if (o === undefined) throw new Error(`applyStatus of a swarm the test never created: ${swarm.metadata.name}`)
    o.status = clone(status)
  }

  private async serverGet (ref: ObjectRef): Promise<KubeObj | undefined> {
    this.record('get', `${ref.kind}/${ref.name}`)
    const o = this.objects.get(keyOf(ref.kind, ref.namespace, ref.name))
    return o === undefined ? undefined : clone(o)
  }

  private async event (e: EventInput): Promise<void> {
    this.record('event', `${e.type}/${e.reason}`)
    this.events.push({ ...e, swarm: clone(e.swarm) })
  }
}
