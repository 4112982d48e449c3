/**
 * Lease-based leader election (coordination.k8s.io/v1) with client-go's semantics: a follower
 * takes the lease only when its record has not changed for leaseDuration by the follower's own
 * clock (no trust in remote timestamps); the leader renews every retryPeriod and gives up — the
 * process exits — when it could not renew within renewDeadline. Races lose safely: every write
 * carries the resourceVersion read, so a concurrent write fails with 409.
 */
import { ApiError, type RestClient } from './kube/rest.js'
import { resourcePath } from './kube/resources.js'

export interface LeaderOptions {
  namespace: string
  name: string
  identity: string
  leaseDurationMs: number
  renewDeadlineMs: number
  retryPeriodMs: number
}

export const LEADER_DEFAULTS = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 }

interface Lease { metadata: { resourceVersion?: string, name: string, namespace: string }, spec?: { holderIdentity?: string, leaseDurationSeconds?: number, acquireTime?: string, renewTime?: string, leaseTransitions?: number } }

const microTime = (d: Date) => d.toISOString().replace('Z', '000Z')
const sleep = async (ms: number, signal?: AbortSignal) => await new Promise<void>(resolve => {
  const t = setTimeout(resolve, ms)
  signal?.addEventListener('abort', () => { clearTimeout(t); resolve() }, { once: true })
})

export class LeaderElector {
  private observedRecord = ''
  private observedAt = 0
  private leading = false
  /** The acquire/renew request in flight, which release() must let finish first (else its write conflicts). */
  private inflight: Promise<boolean> = Promise.resolve(false)

  constructor (private readonly rest: RestClient, private readonly o: LeaderOptions, private readonly log: { info (o: object, m: string): void, warn (o: object, m: string): void }) {}

  get isLeader (): boolean { return this.leading }

  /** Resolves once this process holds the lease (or never, if aborted first). */
  async acquire (signal: AbortSignal): Promise<boolean> {
    while (!signal.aborted) {
      if (await this.tryAcquireOrRenew()) {
        this.leading = true
        this.log.info({ lease: `${this.o.namespace}/${this.o.name}`, identity: this.o.identity }, 'became leader')
        return true
      }
      await sleep(this.o.retryPeriodMs, signal)
    }
    return false
  }

  /** Renews until aborted (resolves) or until renewing fails for renewDeadline (calls onLost). */
  async holdUntil (signal: AbortSignal, onLost: () => void): Promise<void> {
    let lastRenew = Date.now()
    while (!signal.aborted) {
      await sleep(this.o.retryPeriodMs, signal)
      if (signal.aborted) break
      if (await this.tryAcquireOrRenew()) { lastRenew = Date.now(); continue }
      if (Date.now() - lastRenew > this.o.renewDeadlineMs) {
        this.leading = false
        this.log.warn({ lease: `${this.o.namespace}/${this.o.name}` }, 'lost the lease')
        onLost()
        return
      }
    }
  }

  /** Gives the lease up on a clean shutdown so a standby takes over at once. */
  async release (): Promise<void> {
    if (!this.leading) return
    this.leading = false
    await this.inflight.catch(() => false)
    for (let attempt = 1; attempt <= 3; attempt++) {
      try {
        const lease = await this.rest.request<Lease>('GET', resourcePath('Lease', this.o.namespace, this.o.name))
        if (lease.spec?.holderIdentity !== this.o.identity) return
        await this.rest.request('PUT', resourcePath('Lease', this.o.namespace, this.o.name), {
          body: { ...lease, spec: { ...lease.spec, holderIdentity: '', leaseDurationSeconds: 1, renewTime: microTime(new Date()) } }
        })
        this.log.info({ lease: `${this.o.namespace}/${this.o.name}` }, 'released the lease')
        return
      } catch (e) {
        if (!(e instanceof ApiError && e.code === 409) || attempt === 3) { this.log.warn({ err: String(e) }, 'could not release the lease'); return }
      }
    }
  }

  private async tryAcquireOrRenew (): Promise<boolean> {
    this.inflight = this.acquireOrRenewOnce()
    return await this.inflight
  }

  private async acquireOrRenewOnce (): Promise<boolean> {
    const path = resourcePath('Lease', this.o.namespace, this.o.name)
    const now = new Date()
    const spec = { holderIdentity: this.o.identity, leaseDurationSeconds: Math.ceil(this.o.leaseDurationMs / 1000), renewTime: microTime(now) }
    let lease: Lease
    try {
      lease = await this.rest.request<Lease>('GET', path)
    } catch (e) {
      if (!(e instanceof ApiError && e.code === 404)) { this.log.warn({ err: String(e) }, 'could not read the lease'); return false }
      try {
        await this.rest.request('POST', resourcePath('Lease', this.o.namespace), {
          body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: this.o.name, namespace: this.o.namespace }, spec: { ...spec, acquireTime: microTime(now), leaseTransitions: 0 } }
        })
        return true
      } catch { return false }
    }
    const record = JSON.stringify(lease.spec ?? {})
    if (record !== this.observedRecord) { this.observedRecord = record; this.observedAt = Date.now() }
    const holder = lease.spec?.holderIdentity ?? ''
    const duration = (lease.spec?.leaseDurationSeconds ?? 0) * 1000
    const mine = holder === this.o.identity
    if (!mine && holder !== '' && Date.now() - this.observedAt < duration) return false
    try {
      await this.rest.request('PUT', path, {
        body: {
          apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: lease.metadata,
          spec: { ...lease.spec, ...spec, ...(mine ? {} : { acquireTime: microTime(now), leaseTransitions: (lease.spec?.leaseTransitions ?? 0) + 1 }) }
        }
      })
      return true
    } catch { return false }
  }
}
