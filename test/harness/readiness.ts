/** Polls an HTTP(S) endpoint until it answers 200, the process dies, or time runs out. */
import { request as httpsRequest } from 'node:https'
import { request as httpRequest } from 'node:http'
import { readFileSync } from 'node:fs'
import type { GroupProcess } from './process-group.js'

export interface TlsClient { readonly ca?: string, readonly cert?: string, readonly key?: string }

export async function httpGetStatus (url: string, tls: TlsClient = {}, timeoutMs = 2000): Promise<number> {
  return await new Promise((resolve) => {
    const u = new URL(url)
    const options = u.protocol === 'https:'
      ? {
          rejectUnauthorized: tls.ca !== undefined,
          ca: tls.ca !== undefined ? readFileSync(tls.ca) : undefined,
          cert: tls.cert !== undefined ? readFileSync(tls.cert) : undefined,
          key: tls.key !== undefined ? readFileSync(tls.key) : undefined,
          timeout: timeoutMs
        }
      : { timeout: timeoutMs }
    const req = (u.protocol === 'https:' ? httpsRequest : httpRequest)(u, options, (res) => {
      res.resume()
      resolve(res.statusCode ?? 0)
    })
    req.on('timeout', () => req.destroy())
    req.on('error', () => resolve(0))
    req.end()
  })
}

export async function waitForHttpOk (name: string, url: string, process: GroupProcess, timeoutMs: number, tls: TlsClient = {}): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (process.hasExited()) throw new Error(`${name} exited before it became ready; see its log ${process.logFile}.`)
    if (await httpGetStatus(url, tls) === 200) return
    if (Date.now() > deadline) throw new Error(`${name} was not ready at ${url} within ${timeoutMs / 1000} s; see its log ${process.logFile}.`)
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
}
