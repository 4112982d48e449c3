/**
 * Materialises a pod's volumes as directories under its pod dir and maps every container's
 * mountPath to one of them. Containers are plain processes, so they cannot see /etc/foo: the
 * kubelet rewrites each mountPath prefix that occurs in env values, command, args and workingDir
 * to the local directory (see rewritePaths). Supported: secret, configMap, emptyDir, downwardAPI,
 * projected (serviceAccountToken, secret, configMap, downwardAPI), hostPath (used as is),
 * persistentVolumeClaim (the claim's bound PersistentVolume's hostPath or local path, so every pod
 * using the claim shares one folder); any other kind becomes an empty directory.
 */
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import type { V1Pod, V1Container, V1KeyToPath, V1DownwardAPIVolumeFile, V1PersistentVolumeClaimVolumeSource } from '@kubernetes/client-node'
import { ContainerConfigError, fieldRefValue, type PodAddresses } from './env.js'
import type { PodSources } from './pod-sources.js'
import { kubeconfigYaml } from '../kubeconfig.js'

export const SERVICE_ACCOUNT_MOUNT = '/var/run/secrets/kubernetes.io/serviceaccount'

/**
 * A volume that cannot be mounted yet (claim missing or unbound, its PersistentVolume missing or of
 * a kind this kubelet cannot mount): the pod stays ContainerCreating with a FailedMount Event, and
 * the kubelet tries again, as the real volume manager does.
 */
export class VolumeMountError extends Error {
  constructor (readonly volume: string, detail: string) {
    super(`MountVolume.SetUp failed for volume "${volume}": ${detail}`)
    this.name = 'VolumeMountError'
  }
}

/**
 * The local folder behind a persistentVolumeClaim volume, as a node sees it: the claim (Bound, with
 * spec.volumeName) → its PersistentVolume (bound back to this claim) → the PV's hostPath (created
 * when its type is unset or DirectoryOrCreate) or local path (must exist).
 */
export async function claimPath (namespace: string, volume: string, source: V1PersistentVolumeClaimVolumeSource, sources: Pick<PodSources, 'persistentVolumeClaim' | 'persistentVolume'>): Promise<string> {
  const claimName = source.claimName
  const claim = await sources.persistentVolumeClaim(namespace, claimName)
  if (claim === undefined) throw new VolumeMountError(volume, `persistentvolumeclaim "${claimName}" not found`)
  const pvName = claim.spec?.volumeName ?? ''
  const phase = claim.status?.phase ?? ''
  if (phase !== 'Bound' || pvName === '') throw new VolumeMountError(volume, `PVC ${namespace}/${claimName} has non-bound phase ("${phase}") or empty pvc.Spec.VolumeName ("${pvName}")`)
  const pv = await sources.persistentVolume(pvName)
  if (pv === undefined) throw new VolumeMountError(volume, `persistentvolume "${pvName}" (bound to PVC ${namespace}/${claimName}) not found`)
  const ref = pv.spec?.claimRef
  if (ref?.name !== claimName || ref.namespace !== namespace || (ref.uid !== undefined && ref.uid !== claim.metadata?.uid)) {
    throw new VolumeMountError(volume, `persistentvolume "${pvName}" is not bound to PVC ${namespace}/${claimName} (its claimRef: ${ref === undefined ? 'none' : `${ref.namespace ?? ''}/${ref.name ?? ''}`})`)
  }
  const hostPath = pv.spec?.hostPath
  if (hostPath !== undefined) {
    const type = hostPath.type ?? ''
    if (type === '' || type === 'DirectoryOrCreate') mkdirSync(hostPath.path, { recursive: true })
    else if (type === 'Directory' && !(existsSync(hostPath.path) && statSync(hostPath.path).isDirectory())) throw new VolumeMountError(volume, `hostPath type check failed: ${hostPath.path} is not a directory`)
    return hostPath.path
  }
  const local = pv.spec?.local
  if (local !== undefined) {
    if (!existsSync(local.path)) throw new VolumeMountError(volume, `local volume path ${local.path} of persistentvolume "${pvName}" does not exist`)
    return local.path
  }
  throw new VolumeMountError(volume, `persistentvolume "${pvName}" has neither hostPath nor local: the test kubelet mounts only those`)
}

export interface ApiServerAccess { readonly server: string, readonly caCertFile: string }

export interface MaterialisedVolumes {
  /** volume name → local directory (or hostPath). */
  readonly dirs: ReadonlyMap<string, string>
  /** volume names that carry a service-account token and a kubeconfig file using it. */
  readonly tokenVolumes: ReadonlySet<string>
}

function writeFiles (dir: string, files: ReadonlyArray<readonly [string, Buffer | string]>, mode?: number): void {
  for (const [path, content] of files) {
    const target = join(dir, path)
    mkdirSync(dirname(target), { recursive: true })
    writeFileSync(target, content, { mode: mode ?? 0o644 })
  }
}

function selectItems (all: Record<string, Buffer | string>, items: V1KeyToPath[] | undefined, what: string): Array<[string, Buffer | string]> {
  if (items === undefined || items.length === 0) return Object.entries(all)
  return items.map((item) => {
    const value = all[item.key]
    if (value === undefined) throw new ContainerConfigError(`couldn't find key ${item.key} in ${what}`)
    return [item.path, value]
  })
}

export async function materialiseVolumes (pod: V1Pod, podDir: string, addresses: PodAddresses, sources: PodSources, api: ApiServerAccess): Promise<MaterialisedVolumes> {
  const namespace = pod.metadata?.namespace ?? 'default'
  const dirs = new Map<string, string>()
  const tokenVolumes = new Set<string>()
  const secretFiles = async (name: string, items: V1KeyToPath[] | undefined, optional: boolean | undefined): Promise<Array<[string, Buffer | string]>> => {
    const secret = await sources.secret(namespace, name)
    if (secret === undefined) {
      if (optional === true) return []
      throw new ContainerConfigError(`secret "${name}" not found`)
    }
    const all = Object.fromEntries(Object.entries(secret.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64')]))
    return selectItems(all, items, `Secret ${namespace}/${name}`)
  }
  const configMapFiles = async (name: string, items: V1KeyToPath[] | undefined, optional: boolean | undefined): Promise<Array<[string, Buffer | string]>> => {
    const cm = await sources.configMap(namespace, name)
    if (cm === undefined) {
      if (optional === true) return []
      throw new ContainerConfigError(`configmap "${name}" not found`)
    }
    const binary = Object.fromEntries(Object.entries(cm.binaryData ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64')]))
    return selectItems({ ...cm.data, ...binary }, items, `ConfigMap ${namespace}/${name}`)
  }
  const downwardFiles = (items: V1DownwardAPIVolumeFile[] | undefined): Array<[string, string]> =>
    (items ?? []).map((item) => [item.path, item.fieldRef !== undefined ? fieldRefValue(pod, addresses, item.fieldRef) : ''])

  for (const volume of pod.spec?.volumes ?? []) {
    if (volume.hostPath !== undefined) { dirs.set(volume.name, volume.hostPath.path); continue }
    if (volume.persistentVolumeClaim !== undefined) { dirs.set(volume.name, await claimPath(namespace, volume.name, volume.persistentVolumeClaim, sources)); continue }
    const dir = join(podDir, 'volumes', volume.name)
    mkdirSync(dir, { recursive: true })
    dirs.set(volume.name, dir)
    if (volume.secret !== undefined) {
      writeFiles(dir, await secretFiles(volume.secret.secretName ?? '', volume.secret.items, volume.secret.optional), volume.secret.defaultMode)
    } else if (volume.configMap !== undefined) {
      writeFiles(dir, await configMapFiles(volume.configMap.name ?? '', volume.configMap.items, volume.configMap.optional), volume.configMap.defaultMode)
    } else if (volume.downwardAPI !== undefined) {
      writeFiles(dir, downwardFiles(volume.downwardAPI.items))
    } else if (volume.projected !== undefined) {
      for (const source of volume.projected.sources ?? []) {
        if (source.secret !== undefined) writeFiles(dir, await secretFiles(source.secret.name ?? '', source.secret.items, source.secret.optional))
        if (source.configMap !== undefined) writeFiles(dir, await configMapFiles(source.configMap.name ?? '', source.configMap.items, source.configMap.optional))
        if (source.downwardAPI !== undefined) writeFiles(dir, downwardFiles(source.downwardAPI.items))
        if (source.serviceAccountToken !== undefined) {
          const token = await sources.serviceAccountToken(namespace, pod.spec?.serviceAccountName ?? 'default',
            { name: pod.metadata?.name ?? '', uid: pod.metadata?.uid ?? '' },
            source.serviceAccountToken.audience, source.serviceAccountToken.expirationSeconds ?? 3607)
          writeFiles(dir, [[source.serviceAccountToken.path, token]], 0o600)
          // In-cluster config reads fixed absolute paths; a kubeconfig file works from anywhere.
          writeFiles(dir, [['kubeconfig', kubeconfigYaml(api.server, api.caCertFile, { name: 'pod-service-account', token }, 'in-cluster', namespace)]], 0o600)
          tokenVolumes.add(volume.name)
        }
      }
    }
  }
  return { dirs, tokenVolumes }
}

/** mountPath → local path for one container, longest mountPath first. */
export function mountTable (container: V1Container, volumes: MaterialisedVolumes): Array<[string, string]> {
  const table: Array<[string, string]> = []
  for (const mount of container.volumeMounts ?? []) {
    const dir = volumes.dirs.get(mount.name)
    if (dir === undefined) continue
    const local = mount.subPath !== undefined && mount.subPath !== '' ? join(dir, mount.subPath) : dir
    table.push([mount.mountPath.replace(/\/+$/, ''), local])
  }
  return table.sort((a, b) => b[0].length - a[0].length)
}

/**
 * Replaces every occurrence of a mountPath (as a whole path prefix, at the start of the value or
 * after = : , or a space) with its local directory, in one pass so replacements are never
 * rewritten again.
 */
export function rewritePaths (value: string, table: ReadonlyArray<readonly [string, string]>): string {
  const usable = table.filter(([mountPath]) => mountPath !== '')
  if (usable.length === 0) return value
  const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
  const pattern = new RegExp(`(^|[=:,\\s])(${usable.map(([m]) => escape(m)).join('|')})(?=/|$|[,:\\s])`, 'g')
  const local = new Map(usable)
  return value.replace(pattern, (_m, lead: string, mountPath: string) => lead + (local.get(mountPath) ?? mountPath))
}

/**
 * Brings the files of a pod's configMap volumes up to date with their ConfigMaps, as the real
 * kubelet does on its sync period (there: up to about a minute; here: whenever the pod worker
 * calls, every 2 s). Each file is replaced by a rename, so a reader never sees half of it; keys
 * gone from the ConfigMap are removed. Projected and subPath mounts are not refreshed (nor are
 * they by a real kubelet for subPath).
 */
export async function refreshConfigMapVolumes (pod: V1Pod, volumes: MaterialisedVolumes, sources: Pick<PodSources, 'configMap'>): Promise<void> {
  const namespace = pod.metadata?.namespace ?? 'default'
  for (const volume of pod.spec?.volumes ?? []) {
    const source = volume.configMap
    const dir = volumes.dirs.get(volume.name)
    if (source === undefined || dir === undefined || (source.items?.length ?? 0) > 0) continue
    const cm = await sources.configMap(namespace, source.name ?? '')
    const data: Record<string, string | Buffer> = { ...cm?.data, ...Object.fromEntries(Object.entries(cm?.binaryData ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64')])) }
    for (const [key, value] of Object.entries(data)) {
      const tmp = join(dir, `..${key}.tmp`)
      writeFileSync(tmp, value, { mode: source.defaultMode ?? 0o644 })
      renameSync(tmp, join(dir, key))
    }
    for (const name of readdirSync(dir)) if (!(name in data)) rmSync(join(dir, name), { force: true })
  }
}
