import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Cluster } from './cluster.js'
import { waitFor } from './wait.js'

/**
 * A claim bound to a hostPath PersistentVolume (ReadWriteMany, no storage class) on this machine,
 * as a cluster's NFS or CephFS claim would be: the real controller-manager binds the pair and the
 * test kubelet mounts the PV's folder. Waits until the claim is Bound.
 */
export async function hostPathClaim (cluster: Cluster, o: { namespace: string, claim: string, pv: string, path: string }): Promise<void> {
  await applyJson(cluster, {
    apiVersion: 'v1', kind: 'PersistentVolumeClaim', metadata: { name: o.claim, namespace: o.namespace },
    spec: { accessModes: ['ReadWriteMany'], resources: { requests: { storage: '1Gi' } }, storageClassName: '', volumeName: o.pv }
  }, `pvc-${o.namespace}-${o.claim}`)
  await hostPathVolumeFor(cluster, o)
}

/**
 * A hostPath PersistentVolume (ReadWriteMany, no storage class, 1Gi) pre-bound to a claim that
 * someone else made (an operator's claimTemplate), as a static provisioner would: the real
 * controller-manager binds the pair. Waits until the claim is Bound.
 */
export async function hostPathVolumeFor (cluster: Cluster, o: { namespace: string, claim: string, pv: string, path: string }): Promise<void> {
  await applyJson(cluster, {
    apiVersion: 'v1', kind: 'PersistentVolume', metadata: { name: o.pv },
    spec: {
      capacity: { storage: '1Gi' }, accessModes: ['ReadWriteMany'], persistentVolumeReclaimPolicy: 'Retain', storageClassName: '',
      claimRef: { namespace: o.namespace, name: o.claim }, hostPath: { path: o.path, type: 'DirectoryOrCreate' }
    }
  }, `pv-${o.pv}`)
  await waitFor(`claim ${o.claim} to be Bound`, async () => {
    const r = await cluster.kubectl('get', 'pvc', o.claim, '-n', o.namespace, '-o', 'jsonpath={.status.phase}')
    return r.code === 0 && r.stdout.trim() === 'Bound'
  }, 60_000, 500)
}

async function applyJson (cluster: Cluster, obj: object, name: string): Promise<void> {
  const file = join(cluster.dir, `${name}.json`)
  writeFileSync(file, JSON.stringify(obj))
  const r = await cluster.kubectl('apply', '-f', file)
  if (r.code !== 0) throw new Error(`kubectl apply of ${name}: ${r.stderr}`)
}
