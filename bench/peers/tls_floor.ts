/**
 * The native-TLS floor: one butterfly all-reduce's traffic over Node's own TLS sockets (OpenSSL),
 * with a throwaway self-signed certificate made by the openssl CLI. This is what an encrypted data
 * path can reach on this machine without libp2p's framing.
 */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createServer, connect, type TLSSocket } from 'node:tls'
import { runBenchPeer } from '../lib/peer-client.js'
import { createSocketFloor } from '../lib/socket-floor.js'

function selfSignedCertificate (): { key: Buffer, cert: Buffer } {
  const dir = mkdtempSync(join(tmpdir(), 'bench-tls-'))
  try {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-subj', '/CN=bench', '-days', '1', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')], { stdio: 'ignore' })
    return { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) }
  } catch {
    throw new Error('could not make a self-signed certificate: the openssl command is needed for the TLS floor')
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

await runBenchPeer(async (env) => {
  const { key, cert } = selfSignedCertificate()
  return await createSocketFloor(env, {
    async listen (onSocket) {
      const server = createServer({ key, cert, minVersion: 'TLSv1.3' }, onSocket)
      await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(0, '127.0.0.1', resolve) })
      return server
    },
    async connect (host, port) {
      // Each peer has its own throwaway certificate: the floor measures the cipher, not the trust model.
      return await new Promise((resolve, reject) => {
        const socket = connect({ host, port, rejectUnauthorized: false, minVersion: 'TLSv1.3' }, () => resolve(socket))
        socket.once('error', reject)
      })
    },
    describe: (socket) => {
      const cipher = (socket as TLSSocket).getCipher?.()
      return cipher != null ? `native TLS ${cipher.version} ${cipher.name}` : 'native TLS'
    }
  })
})
