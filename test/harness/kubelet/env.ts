/**
 * Resolves a container's environment the way the kubelet does: `envFrom` first, then `env` in
 * order with $(VAR) expansion; values from literals, fieldRef, resourceFieldRef, secretKeyRef and
 * configMapKeyRef. A missing required Secret/ConfigMap/key throws (CreateContainerConfigError).
 */
import type { V1Container, V1Pod, V1ObjectFieldSelector } from '@kubernetes/client-node'
import type { PodSources } from './pod-sources.js'

export interface PodAddresses { readonly podIP: string, readonly hostIP: string }

export class ContainerConfigError extends Error {}

export function fieldRefValue (pod: V1Pod, addresses: PodAddresses, ref: V1ObjectFieldSelector): string {
  const path = ref.fieldPath
  const meta = pod.metadata ?? {}
  const mapKey = /^metadata\.(labels|annotations)\['(.+)'\]$/.exec(path)
  if (mapKey !== null) return (mapKey[1] === 'labels' ? meta.labels : meta.annotations)?.[mapKey[2]] ?? ''
  switch (path) {
    case 'metadata.name': return meta.name ?? ''
    case 'metadata.namespace': return meta.namespace ?? ''
    case 'metadata.uid': return meta.uid ?? ''
    case 'metadata.labels': return Object.entries(meta.labels ?? {}).map(([k, v]) => `${k}="${v}"`).join('\n')
    case 'metadata.annotations': return Object.entries(meta.annotations ?? {}).map(([k, v]) => `${k}="${v}"`).join('\n')
    case 'spec.nodeName': return pod.spec?.nodeName ?? ''
    case 'spec.serviceAccountName': return pod.spec?.serviceAccountName ?? ''
    case 'status.podIP': case 'status.podIPs': return addresses.podIP
    case 'status.hostIP': case 'status.hostIPs': return addresses.hostIP
    default: throw new ContainerConfigError(`The test kubelet does not support fieldRef "${path}".`)
  }
}

/** $(NAME) → earlier value; $$(NAME) → literal $(NAME); unknown names stay as written. */
export function expandVars (value: string, vars: ReadonlyMap<string, string>): string {
  return value.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)/g, (match, name: string | undefined) =>
    name === undefined ? '$' : (vars.get(name) ?? match))
}

function decode (secretData: Record<string, string> | undefined, key: string): string | undefined {
  const b64 = secretData?.[key]
  return b64 === undefined ? undefined : Buffer.from(b64, 'base64').toString('utf8')
}

export async function resolveEnv (pod: V1Pod, container: V1Container, addresses: PodAddresses, sources: PodSources): Promise<Map<string, string>> {
  const namespace = pod.metadata?.namespace ?? 'default'
  const vars = new Map<string, string>()
  for (const from of container.envFrom ?? []) {
    const prefix = from.prefix ?? ''
    if (from.configMapRef !== undefined) {
      const cm = await sources.configMap(namespace, from.configMapRef.name ?? '')
      if (cm === undefined) {
        if (from.configMapRef.optional === true) continue
        throw new ContainerConfigError(`configmap "${from.configMapRef.name}" not found`)
      }
      for (const [k, v] of Object.entries(cm.data ?? {})) vars.set(prefix + k, v)
    }
    if (from.secretRef !== undefined) {
      const secret = await sources.secret(namespace, from.secretRef.name ?? '')
      if (secret === undefined) {
        if (from.secretRef.optional === true) continue
        throw new ContainerConfigError(`secret "${from.secretRef.name}" not found`)
      }
      for (const k of Object.keys(secret.data ?? {})) vars.set(prefix + k, decode(secret.data, k) ?? '')
    }
  }
  for (const env of container.env ?? []) {
    const from = env.valueFrom
    if (from === undefined) { vars.set(env.name, expandVars(env.value ?? '', vars)); continue }
    if (from.fieldRef !== undefined) { vars.set(env.name, fieldRefValue(pod, addresses, from.fieldRef)); continue }
    if (from.resourceFieldRef !== undefined) {
      const [kind, resource] = from.resourceFieldRef.resource.split('.')
      const resources = kind === 'limits' ? container.resources?.limits : container.resources?.requests
      vars.set(env.name, String(resources?.[resource] ?? '0'))
      continue
    }
    if (from.secretKeyRef !== undefined) {
      const ref = from.secretKeyRef
      const secret = await sources.secret(namespace, ref.name ?? '')
      const value = decode(secret?.data, ref.key)
      if (value === undefined) {
        if (ref.optional === true) continue
        throw new ContainerConfigError(secret === undefined ? `secret "${ref.name}" not found` : `couldn't find key ${ref.key} in Secret ${namespace}/${ref.name}`)
      }
      vars.set(env.name, value)
      continue
    }
    if (from.configMapKeyRef !== undefined) {
      const ref = from.configMapKeyRef
      const cm = await sources.configMap(namespace, ref.name ?? '')
      const value = cm?.data?.[ref.key]
      if (value === undefined) {
        if (ref.optional === true) continue
        throw new ContainerConfigError(cm === undefined ? `configmap "${ref.name}" not found` : `couldn't find key ${ref.key} in ConfigMap ${namespace}/${ref.name}`)
      }
      vars.set(env.name, value)
    }
  }
  return vars
}
