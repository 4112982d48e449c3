/**
 * One probe attempt (httpGet, tcpSocket, exec) against a pod's loopback address, and a prober
 * that runs a probe on its schedule and reports success/failure after the thresholds, as the
 * kubelet's prober does (initialDelaySeconds, periodSeconds, timeoutSeconds, successThreshold,
 * failureThreshold).
 */
import { request } from 'node:http'
import { request as httpsRequest } from 'node:https'
import { connect } from 'node:net'
import { execFile } from 'node:child_process'
import type { V1Probe, V1Container } from '@kubernetes/client-node'

export function resolvePort (port: number | string | undefined, container: V1Container): number | undefined {
  if (typeof port === 'number') return port
  if (port === undefined) return undefined
  if (/^\d+$/.test(port)) return Number.parseInt(port, 10)
  return container.ports?.find((p) => p.name === port)?.containerPort
}

export async function probeOnce (probe: V1Probe, container: V1Container, podIP: string, env: NodeJS.ProcessEnv, cwd: string): Promise<boolean> {
  const timeoutMs = (probe.timeoutSeconds ?? 1) * 1000
  if (probe.httpGet !== undefined) {
    const port = resolvePort(probe.httpGet.port as number | string, container)
    if (port === undefined) return false
    const scheme = (probe.httpGet.scheme ?? 'HTTP').toUpperCase()
    const headers = Object.fromEntries((probe.httpGet.httpHeaders ?? []).map((h) => [h.name, h.value]))
    return await new Promise((resolve) => {
      const req = (scheme === 'HTTPS' ? httpsRequest : request)({
        host: probe.httpGet?.host ?? podIP, port, path: probe.httpGet?.path ?? '/', method: 'GET',
        headers: { 'user-agent': 'kube-probe/1.34', ...headers }, timeout: timeoutMs, rejectUnauthorized: false
      }, (res) => { res.resume(); const s = res.statusCode ?? 0; resolve(s >= 200 && s < 400) })
      req.on('timeout', () => req.destroy())
      req.on('error', () => resolve(false))
      req.end()
    })
  }
  if (probe.tcpSocket !== undefined) {
    const port = resolvePort(probe.tcpSocket.port as number | string, container)
    if (port === undefined) return false
    return await new Promise((resolve) => {
      const socket = connect({ host: probe.tcpSocket?.host ?? podIP, port, timeout: timeoutMs })
      socket.once('connect', () => { socket.destroy(); resolve(true) })
      socket.once('timeout', () => { socket.destroy(); resolve(false) })
      socket.once('error', () => resolve(false))
    })
  }
  if (probe.exec?.command !== undefined && probe.exec.command.length > 0) {
    const [file, ...args] = probe.exec.command
    return await new Promise((resolve) => {
      execFile(file, args, { env, cwd, timeout: timeoutMs }, (error) => resolve(error === null))
    })
  }
  return false
}

export interface Prober { stop: () => void }

/** Calls onResult(true|false) whenever the thresholded result changes (first result included). */
export function startProber (probe: V1Probe, attempt: () => Promise<boolean>, onResult: (ok: boolean) => void): Prober {
  let stopped = false
  let timer: NodeJS.Timeout | undefined
  let successes = 0
  let failures = 0
  let current: boolean | undefined
  const period = (probe.periodSeconds ?? 10) * 1000
  const tick = async (): Promise<void> => {
    if (stopped) return
    const ok = await attempt()
    if (stopped) return
    if (ok) { successes++; failures = 0 } else { failures++; successes = 0 }
    let next = current
    if (ok && successes >= (probe.successThreshold ?? 1)) next = true
    if (!ok && failures >= (probe.failureThreshold ?? 3)) next = false
    if (next !== undefined && next !== current) { current = next; onResult(next) }
    timer = setTimeout(() => { void tick() }, period)
  }
  timer = setTimeout(() => { void tick() }, (probe.initialDelaySeconds ?? 0) * 1000)
  return { stop: () => { stopped = true; clearTimeout(timer) } }
}
