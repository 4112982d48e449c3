import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { KubeObj } from '../../operator/builders/desired.js'
import type { AveragingSwarm } from '../../api/v1alpha1/index.js'
import { membersData } from '../../operator/builders/members.js'
import { AGENT_CONTAINER, TRAINER_CONTAINER } from '../../operator/builders/pod-template.js'

/** One agent of the local swarm: what the kubelet would run for one pod of a StatefulSet. */
export interface LocalPod {
  readonly name: string
  readonly role: string
  readonly ip: string
  readonly hostname: string
  readonly env: Record<string, string>
  /** The pod's trainer container (sidecar workload): what to run and its env, resolved as the agent's. */
  readonly trainer?: LocalTrainer
}

/** A trainer container of a pod. The image is not used locally: command and args run on this machine. */
export interface LocalTrainer {
  readonly image: string
  readonly command: readonly string[]
  readonly args: readonly string[]
  readonly env: Record<string, string>
}

interface Container { name: string, image?: string, command?: string[], args?: string[], env?: EnvVar[] }

interface EnvVar { name: string, value?: string, valueFrom?: { fieldRef?: { fieldPath: string }, secretKeyRef?: { name: string, key: string, optional?: boolean }, configMapKeyRef?: { name: string, key: string, optional?: boolean } } }

/**
 * Expands the operator's desired StatefulSets into pods with loopback addresses, resolving
 * their env the way a kubelet does (value, fieldRef, secretKeyRef, configMapKeyRef) against the
 * desired Secrets and ConfigMaps. The agents are thus configured exactly as in a cluster.
 */
export function expandPods (objects: readonly KubeObj[], namespace: string, clusterDomain: string): LocalPod[] {
  const secrets = new Map<string, Record<string, string>>()
  const configMaps = new Map<string, Record<string, string>>()
  for (const o of objects) {
    if (o.kind === 'Secret') {
      const data = (o.data ?? {}) as Record<string, string>
      const stringData = (o.stringData ?? {}) as Record<string, string>
      secrets.set(o.metadata.name, { ...Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v, 'base64').toString()])), ...stringData })
    }
    if (o.kind === 'ConfigMap') configMaps.set(o.metadata.name, (o.data ?? {}) as Record<string, string>)
  }
  const pods: LocalPod[] = []
  let next = 2
  for (const set of objects.filter(o => o.kind === 'StatefulSet')) {
    const spec = set.spec as { replicas: number, serviceName: string, template: { metadata?: { labels?: Record<string, string> }, spec: { containers: Container[] } } }
    const container = spec.template.spec.containers.find(c => c.name === AGENT_CONTAINER) ?? spec.template.spec.containers[0]
    const trainerContainer = spec.template.spec.containers.find(c => c.name === TRAINER_CONTAINER)
    for (let ordinal = 0; ordinal < spec.replicas; ordinal++) {
      const name = `${set.metadata.name}-${ordinal}`
      const ip = `127.0.${Math.floor(next / 250)}.${(next % 250) + 2}`
      next++
      const hostname = `${name}.${spec.serviceName}.${namespace}.svc.${clusterDomain}`
      const envOf = (c: Container): Record<string, string> => {
        const env: Record<string, string> = {}
        for (const e of c.env ?? []) {
          const value = resolve(e, { name, namespace, ip }, secrets, configMaps)
          if (value !== undefined) env[e.name] = value
        }
        return env
      }
      const env = envOf(container)
      const trainer = trainerContainer === undefined
        ? undefined
        : { image: trainerContainer.image ?? '', command: trainerContainer.command ?? [], args: trainerContainer.args ?? [], env: envOf(trainerContainer) }
      pods.push({ name, role: spec.template.metadata?.labels?.['averaging.swarm.io/role'] ?? 'agent', ip, hostname, env, ...(trainer === undefined ? {} : { trainer }) })
    }
  }
  return pods
}

function resolve (e: EnvVar, pod: { name: string, namespace: string, ip: string }, secrets: Map<string, Record<string, string>>, configMaps: Map<string, Record<string, string>>): string | undefined {
  if (e.value !== undefined) return e.value
  const from = e.valueFrom
  if (from?.fieldRef != null) {
    const fields: Record<string, string> = { 'metadata.name': pod.name, 'metadata.namespace': pod.namespace, 'status.podIP': pod.ip }
    return fields[from.fieldRef.fieldPath]
  }
  // A Secret the swarm names but does not own (spec.checkpoint.s3.secretRef) is not here: the
  // variable comes from this shell's environment instead (AWS_ACCESS_KEY_ID=... npm start -- ...).
  if (from?.secretKeyRef != null) return secrets.get(from.secretKeyRef.name)?.[from.secretKeyRef.key] ?? process.env[e.name]
  if (from?.configMapKeyRef != null) return configMaps.get(from.configMapKeyRef.name)?.[from.configMapKeyRef.key]
  return undefined
}

/** The members ConfigMap as its mount holds it: the operator's files written into `dir`, a folder of this machine. Returns `dir`. */
export function writeMembersMount (dir: string, swarm: AveragingSwarm): string {
  mkdirSync(dir, { recursive: true })
  for (const [file, text] of Object.entries(membersData(swarm))) writeFileSync(join(dir, file), text)
  return dir
}
