/**
 * Image → local command. The test kubelet has no container runtime: an image names a program of
 * this checkout. Kubernetes semantics are kept: the image's entrypoint is replaced by
 * `container.command` and its default args by `container.args`.
 */
import { join } from 'node:path'
import type { V1Container } from '@kubernetes/client-node'
import { repoRoot } from '../paths.js'
import { AGENT_BUNDLE } from '../../../agent/process/agent-process.js'

export interface ImageEntrypoint {
  /** argv[0]; relative paths are resolved against `cwd`. */
  readonly entrypoint: readonly string[]
  readonly defaultArgs?: readonly string[]
  readonly cwd?: string
}

/** Matched by substring of the image reference, first match wins. */
export type ImageTable = ReadonlyArray<readonly [string, ImageEntrypoint]>

const node = join(repoRoot, 'node_modules', '.bin', 'node')

export const DEFAULT_IMAGES: ImageTable = [
  // The one file Dockerfile.agent's entrypoint runs (npm run build bundles it), so pods here start as the image's do.
  ['averaging-swarm/agent', { entrypoint: [node, AGENT_BUNDLE], cwd: repoRoot }],
  ['averaging-swarm/operator', { entrypoint: [node, join(repoRoot, 'dist', 'operator', 'main.js')], cwd: repoRoot }],
  // A tiny HTTP server for the harness's own proofs (test/harness/images/http-echo.ts).
  ['averaging-swarm/http-echo', { entrypoint: [node, join(repoRoot, 'dist', 'test', 'harness', 'images', 'http-echo.js')], cwd: repoRoot }]
]

export interface LocalCommand {
  readonly file: string
  readonly args: string[]
  readonly cwd: string
  /**
   * How many leading argv entries (file included) come from the image table: paths of this
   * checkout, which volume mountPath rewriting must leave alone (a checkout under /tmp would
   * otherwise be rewritten into a pod's /tmp emptyDir).
   */
  readonly fromImage: number
}

/**
 * The command to run, or an error sentence for the pod's waiting reason. A container that sets
 * `command` runs that program from the machine's PATH whatever its image (e.g. busybox + sleep).
 */
export function resolveCommand (container: V1Container, table: ImageTable, fallbackCwd: string): LocalCommand | string {
  const image = container.image ?? ''
  const entry = table.find(([pattern]) => image.includes(pattern))?.[1]
  const cwd = entry?.cwd ?? fallbackCwd
  if (container.command !== undefined && container.command.length > 0) {
    return { file: container.command[0], args: [...container.command.slice(1), ...(container.args ?? [])], cwd, fromImage: 0 }
  }
  if (entry === undefined) {
    return `The test kubelet has no command for image "${image}"; set container.command or add the image to its image table.`
  }
  return { file: entry.entrypoint[0], args: [...entry.entrypoint.slice(1), ...(container.args ?? entry.defaultArgs ?? [])], cwd, fromImage: entry.entrypoint.length }
}
