import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Workload, WorkloadContext } from '../context.js'
import { SidecarApi, type SidecarStateSharing } from './sidecar-api.js'
import { listenOn } from '../../util/ports.js'

export interface SidecarOptions {
  /** Loopback by default: the trainer shares the pod's network namespace, nobody else should reach it. */
  readonly host: string
  /** AVS_SIDECAR_PORT; 0 picks a free port (tests). */
  readonly port: number
  /** Called with the API's base URL once it listens. */
  readonly onListening?: (baseUrl: string) => void
  /**
   * When given, register downloads the tensors from a live peer (GET /v1/state then says
   * origin "peers") and the agent serves its own afterwards; the workload stops it on shutdown.
   */
  readonly stateSharing?: SidecarStateSharing
  /** AVS_SHM_DIR: the folder trainers create their shared-memory regions in (docs/trainer-api.md). */
  readonly shmDir?: string
  /** Bound of the float32 copy of the tensors; default the container's memory limit (tests set it). */
  readonly memoryBytes?: number
}

/**
 * The sidecar workload: a trainer in another container drives the averager through a local
 * HTTP API (see README.md beside this file). The agent is ready once the API listens.
 */
export function sidecarWorkload (ctx: WorkloadContext, options: SidecarOptions): Workload {
  return {
    async run (): Promise<void> {
      let fail: (err: Error) => void = () => {}
      const fatal = new Promise<never>((_resolve, reject) => { fail = reject })
      fatal.catch(() => {})
      const api = new SidecarApi(ctx, options.stateSharing, { shmDir: options.shmDir, memoryBytes: options.memoryBytes, onFatal: (err) => { fail(err) } })
      // Idle keep-alive connections stay open until the trainer closes them. With Node's 5 s timeout
      // the server hung up on an idle connection just as a trainer, busy for seconds between two
      // calls, sent its next request on it: ECONNRESET ("fetch failed"). The sidecar-region test's
      // trainers compare 6.5 M values between calls; under two CPU burners its GET /v1/state failed
      // 4 runs of 4 so, and passes 4 of 4 with this. One trainer on loopback holds a few sockets.
      const server = createServer(api.handle)
      server.keepAliveTimeout = 0
      await listenOn(server, 'sidecar', options.host, options.port)
      const { port } = server.address() as AddressInfo
      const host = options.host.includes(':') ? `[${options.host}]` : options.host
      const baseUrl = `http://${host}:${port}`
      ctx.log.info({ url: baseUrl }, 'sidecar API listening')
      ctx.setReady(true)
      options.onListening?.(baseUrl)
      let error: Error | undefined
      await Promise.race([aborted(ctx.signal), fatal]).catch((err: Error) => { error = err })
      ctx.setReady(false)
      const closed = new Promise<void>(resolve => { server.close(() => { resolve() }) })
      server.closeIdleConnections()
      await api.close()
      server.closeAllConnections()
      await closed
      ctx.log.info('sidecar API closed')
      if (error !== undefined) throw error
    }
  }
}

async function aborted (signal: AbortSignal): Promise<void> {
  if (signal.aborted) return
  await new Promise<void>(resolve => { signal.addEventListener('abort', () => { resolve() }, { once: true }) })
}
