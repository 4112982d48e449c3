/**
 * The thin layer through which the controller changes the cluster: server-side apply under one
 * field manager, delete, status apply, Events, and the few reads the caches cannot answer.
 */
import { API_GROUP, API_VERSION, KIND } from '../../api/version.js'
import type { AveragingSwarm, AveragingSwarmStatus } from '../../api/v1alpha1/types.js'
import type { KubeObj } from '../objects.js'
import { ApiError, type RestClient } from './rest.js'
import { isKind, resourcePath, type Kind } from './resources.js'

export const FIELD_MANAGER = 'averaging-swarm-operator'
const APPLY = 'application/apply-patch+yaml'

export interface ObjectRef { kind: Kind, namespace: string, name: string, uid?: string }

export interface EventInput {
  swarm: AveragingSwarm
  type: 'Normal' | 'Warning'
  reason: string
  message: string
}

/** What the reconciler needs from the API server; tests can implement it in memory. */
export interface ClusterApi {
  apply (obj: KubeObj): Promise<void>
  /** Creates obj unless an object of its name exists (then false): for objects the operator makes once and never changes. */
  create (obj: KubeObj): Promise<boolean>
  delete (ref: ObjectRef): Promise<void>
  applyStatus (swarm: AveragingSwarm, status: AveragingSwarmStatus): Promise<void>
  get (ref: ObjectRef): Promise<KubeObj | undefined>
  event (e: EventInput): Promise<void>
}

function kindOf (obj: KubeObj): Kind {
  if (!isKind(obj.kind)) throw new Error(`The operator does not know how to write kind ${obj.kind}.`)
  return obj.kind
}

export class KubeClusterApi implements ClusterApi {
  constructor (private readonly rest: RestClient, private readonly fieldManager = FIELD_MANAGER, private readonly component = FIELD_MANAGER) {}

  async apply (obj: KubeObj): Promise<void> {
    await this.rest.request('PATCH', resourcePath(kindOf(obj), obj.metadata.namespace, obj.metadata.name), {
      body: obj, contentType: APPLY, query: { fieldManager: this.fieldManager, force: true }
    })
  }

  async create (obj: KubeObj): Promise<boolean> {
    try {
      await this.rest.request('POST', resourcePath(kindOf(obj), obj.metadata.namespace), { body: obj, query: { fieldManager: this.fieldManager } })
      return true
    } catch (e) {
      if (e instanceof ApiError && e.code === 409) return false
      throw e
    }
  }

  async delete (ref: ObjectRef): Promise<void> {
    try {
      await this.rest.request('DELETE', resourcePath(ref.kind, ref.namespace, ref.name), {
        body: { kind: 'DeleteOptions', apiVersion: 'v1', propagationPolicy: 'Background', ...(ref.uid === undefined ? {} : { preconditions: { uid: ref.uid } }) }
      })
    } catch (e) {
      if (e instanceof ApiError && (e.code === 404 || e.code === 409)) return // already gone, or replaced by a newer object
      throw e
    }
  }

  async applyStatus (swarm: AveragingSwarm, status: AveragingSwarmStatus): Promise<void> {
    const ns = swarm.metadata.namespace ?? 'default'
    await this.rest.request('PATCH', resourcePath('AveragingSwarm', ns, swarm.metadata.name, 'status'), {
      body: { apiVersion: `${API_GROUP}/${API_VERSION}`, kind: KIND, metadata: { name: swarm.metadata.name, namespace: ns }, status },
      contentType: APPLY,
      query: { fieldManager: this.fieldManager, force: true }
    })
  }

  async get (ref: ObjectRef): Promise<KubeObj | undefined> {
    try {
      return await this.rest.request<KubeObj>('GET', resourcePath(ref.kind, ref.namespace, ref.name))
    } catch (e) {
      if (e instanceof ApiError && e.code === 404) return undefined
      throw e
    }
  }

  async event (e: EventInput): Promise<void> {
    const ns = e.swarm.metadata.namespace ?? 'default'
    const now = new Date().toISOString()
    await this.rest.request('POST', resourcePath('Event', ns), {
      body: {
        apiVersion: 'v1',
        kind: 'Event',
        metadata: { generateName: `${e.swarm.metadata.name}.`, namespace: ns },
        involvedObject: { apiVersion: `${API_GROUP}/${API_VERSION}`, kind: KIND, name: e.swarm.metadata.name, namespace: ns, uid: e.swarm.metadata.uid, resourceVersion: e.swarm.metadata.resourceVersion },
        type: e.type,
        reason: e.reason,
        message: e.message,
        source: { component: this.component },
        reportingComponent: this.component,
        reportingInstance: process.env.HOSTNAME ?? 'local',
        action: e.reason,
        firstTimestamp: now,
        lastTimestamp: now,
        count: 1
      }
    })
  }
}
