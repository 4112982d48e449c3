import type { Workload, WorkloadContext } from './context.js'

/**
 * Loads the sidecar workload (agent/workloads/sidecar/) when it is built; the module is
 * imported lazily so the builtin workload never pays for it.
 */
export async function sidecarWorkloadFor (ctx: WorkloadContext, options: { host: string, port: number }): Promise<Workload> {
  const path = './sidecar/workload.js'
  const mod = await import(path) as { sidecarWorkload: (ctx: WorkloadContext, options: { host: string, port: number }) => Workload }
  return mod.sidecarWorkload(ctx, options)
}
