/**
 * A real S3-compatible server for tests: versitygw (Apache-2.0) with its posix backend in a temporary
 * folder, on a free loopback port, root credentials from its env. The binary is built by
 * scripts/build-versitygw.sh into the version-keyed cache (same formula as the script).
 */
import { spawn } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { createServer } from 'node:net'
import { homedir, tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { repoRoot } from '../../harness/paths.js'

export function versitygwBinary (): string {
  const env = process.env
  if (env.AVS_VERSITYGW !== undefined) return env.AVS_VERSITYGW
  const script = readFileSync(join(repoRoot, 'scripts', 'build-versitygw.sh'), 'utf8')
  const version = /VERSITYGW_VERSION:-(v[0-9][0-9A-Za-z.-]*)\}/.exec(script)?.[1]
  if (version === undefined) throw new Error('scripts/build-versitygw.sh does not name a default VERSITYGW_VERSION.')
  const base = env.AVS_CLUSTER_CACHE ?? join(env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'averaging-swarm')
  return resolve(base, `versitygw-${version}`, 'bin', 'versitygw')
}

export const versitygwBuilt = (): boolean => existsSync(versitygwBinary())

async function freePort (): Promise<number> {
  return await new Promise((resolvePort, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => { resolvePort(port) })
    })
  })
}

export interface Versitygw {
  readonly endpoint: string
  readonly accessKeyId: string
  readonly secretAccessKey: string
  /** The posix backend's root: `<root>/<bucket>/<key>`. */
  readonly root: string
  stop: () => Promise<void>
}

export async function startVersitygw (): Promise<Versitygw> {
  const root = await mkdtemp(join(tmpdir(), 'versitygw-'))
  const accessKeyId = 'avs-test-root'
  const secretAccessKey = 'avs-test-secret-0123456789'
  const port = await freePort()
  const endpoint = `http://127.0.0.1:${port}`
  const child = spawn(versitygwBinary(), ['--port', `127.0.0.1:${port}`, '--quiet', 'posix', root], {
    env: { PATH: process.env.PATH, ROOT_ACCESS_KEY: accessKeyId, ROOT_SECRET_KEY: secretAccessKey },
    stdio: ['ignore', 'ignore', 'pipe']
  })
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (s: string) => { stderr = (stderr + s).slice(-4000) })
  const exited = new Promise<void>(resolveExit => child.once('exit', () => { resolveExit() }))
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
    await exited
    await rm(root, { recursive: true, force: true })
  }
  const deadline = Date.now() + 20_000
  for (;;) {
    if (child.exitCode !== null) {
      await stop()
      throw new Error(`versitygw exited with ${child.exitCode}: ${stderr.trim()}`)
    }
    // Any HTTP answer (403 without credentials) means it listens.
    if (await fetch(endpoint).then(() => true, () => false)) break
    if (Date.now() > deadline) {
      await stop()
      throw new Error(`versitygw did not answer on ${endpoint} within 20 s: ${stderr.trim()}`)
    }
    await new Promise(resolveWait => setTimeout(resolveWait, 100))
  }
  return { endpoint, accessKeyId, secretAccessKey, root, stop }
}
