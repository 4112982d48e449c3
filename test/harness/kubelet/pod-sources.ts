/** What the kubelet reads from the API to start a pod: Secrets, ConfigMaps, ServiceAccount tokens, claims and their volumes. */
import { CoreV1Api, type KubeConfig, type V1Secret, type V1ConfigMap, type V1PersistentVolumeClaim, type V1PersistentVolume } from '@kubernetes/client-node'

export interface PodSources {
  secret: (namespace: string, name: string) => Promise<V1Secret | undefined>
  configMap: (namespace: string, name: string) => Promise<V1ConfigMap | undefined>
  serviceAccountToken: (namespace: string, serviceAccount: string, pod: { name: string, uid: string }, audience: string | undefined, expirationSeconds: number) => Promise<string>
  persistentVolumeClaim: (namespace: string, name: string) => Promise<V1PersistentVolumeClaim | undefined>
  persistentVolume: (name: string) => Promise<V1PersistentVolume | undefined>
}

function notFound (error: unknown): boolean {
  return (error as { code?: number }).code === 404
}

export function apiPodSources (kc: KubeConfig): PodSources {
  const core = kc.makeApiClient(CoreV1Api)
  return {
    secret: async (namespace, name) => {
      try { return await core.readNamespacedSecret({ namespace, name }) } catch (error) { if (notFound(error)) return undefined; throw error }
    },
    configMap: async (namespace, name) => {
      try { return await core.readNamespacedConfigMap({ namespace, name }) } catch (error) { if (notFound(error)) return undefined; throw error }
    },
    persistentVolumeClaim: async (namespace, name) => {
      try { return await core.readNamespacedPersistentVolumeClaim({ namespace, name }) } catch (error) { if (notFound(error)) return undefined; throw error }
    },
    persistentVolume: async (name) => {
      try { return await core.readPersistentVolume({ name }) } catch (error) { if (notFound(error)) return undefined; throw error }
    },
    serviceAccountToken: async (namespace, serviceAccount, pod, audience, expirationSeconds) => {
      const request = await core.createNamespacedServiceAccountToken({
        namespace,
        name: serviceAccount,
        body: {
          spec: {
            audiences: audience !== undefined ? [audience] : [],
            expirationSeconds,
            boundObjectRef: { apiVersion: 'v1', kind: 'Pod', name: pod.name, uid: pod.uid }
          }
        }
      })
      const token = request.status?.token
      if (token === undefined) throw new Error(`The API server returned no token for service account ${namespace}/${serviceAccount}.`)
      return token
    }
  }
}
