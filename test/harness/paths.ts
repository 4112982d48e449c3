/**
 * Where things are: the checkout's root, the pinned Kubernetes version (read from
 * test/cluster/go.mod, the single source of truth) and the version-keyed binary cache that
 * scripts/build-control-plane.sh fills.
 */
import { readFileSync, existsSync } from 'node:fs'
import { homedir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

/** Walks up from this file (src or dist) to the directory holding package.json. */
function findRepoRoot (): string {
  let dir = dirname(fileURLToPath(import.meta.url))
  while (!existsSync(join(dir, 'package.json')) || !existsSync(join(dir, 'test', 'cluster', 'go.mod'))) {
    const up = dirname(dir)
    if (up === dir) throw new Error('Cannot find the AveragingSwarm checkout above ' + fileURLToPath(import.meta.url) + '.')
    dir = up
  }
  return dir
}

export const repoRoot = findRepoRoot()

export function kubernetesVersion (): string {
  const goMod = readFileSync(join(repoRoot, 'test', 'cluster', 'go.mod'), 'utf8')
  const match = /^\s*k8s\.io\/kubernetes (v[0-9.]+)/m.exec(goMod)
  if (match === null) throw new Error('test/cluster/go.mod does not require k8s.io/kubernetes.')
  return match[1]
}

/** Same formula as scripts/build-control-plane.sh. */
export function binDir (): string {
  const env = process.env
  const base = env.AVS_CLUSTER_CACHE ?? join(env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'averaging-swarm')
  return resolve(base, `k8s-${kubernetesVersion()}`, 'bin')
}

export type Binary = 'etcd' | 'kube-apiserver' | 'kube-controller-manager' | 'kube-scheduler' | 'kubectl' | 'kwok'

export function binary (name: Binary): string {
  const path = join(binDir(), name)
  if (!existsSync(path)) {
    throw new Error(`${name} is not built yet (${path} is missing): run \`npm run cluster:build\` first.`)
  }
  return path
}

export function controlPlaneBuilt (): boolean {
  return (['etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler'] as const)
    .every((name) => existsSync(join(binDir(), name)))
}
