/**
 * The cluster's throw-away PKI, envtest-style: one CA (ECDSA P-256, 7 days), the apiserver's
 * serving certificate (localhost, 127.0.0.1 and the in-cluster names), an admin client
 * certificate in group system:masters, and the service-account signing key pair.
 * Certificates come from the openssl CLI (node:crypto cannot issue X.509), keys as PEM files.
 */
import { execFileSync } from 'node:child_process'
import { generateKeyPairSync } from 'node:crypto'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

export interface Pki {
  readonly dir: string
  readonly caCert: string
  readonly caKey: string
  readonly servingCert: string
  readonly servingKey: string
  readonly adminCert: string
  readonly adminKey: string
  readonly serviceAccountPublicKey: string
  readonly serviceAccountPrivateKey: string
}

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '7']

function openssl (args: readonly string[]): void {
  try {
    execFileSync('openssl', [...args], { stdio: ['ignore', 'ignore', 'pipe'] })
  } catch (error) {
    const stderr = (error as { stderr?: Buffer }).stderr?.toString().trim() ?? ''
    throw new Error(`openssl ${args[0]} failed while making the test cluster's certificates: ${stderr}`)
  }
}

export function makePki (dir: string): Pki {
  mkdirSync(dir, { recursive: true })
  const p = (name: string): string => join(dir, name)
  openssl(['req', '-x509', ...EC, '-keyout', p('ca.key'), '-out', p('ca.crt'), '-subj', '/CN=averaging-swarm-test-ca'])
  const issued = (name: string, subject: string, extensions: readonly string[]): void => {
    openssl(['req', '-x509', '-CA', p('ca.crt'), '-CAkey', p('ca.key'), ...EC,
      '-keyout', p(`${name}.key`), '-out', p(`${name}.crt`), '-subj', subject,
      '-addext', 'basicConstraints=critical,CA:FALSE', ...extensions.flatMap((e) => ['-addext', e])])
  }
  const sans = ['DNS:localhost', 'DNS:kubernetes', 'DNS:kubernetes.default', 'DNS:kubernetes.default.svc',
    'DNS:kubernetes.default.svc.cluster.local', 'IP:127.0.0.1', 'IP:10.0.0.1']
  issued('apiserver', '/CN=kube-apiserver', ['subjectAltName=' + sans.join(','), 'extendedKeyUsage=serverAuth'])
  issued('admin', '/O=system:masters/CN=avs-admin', ['extendedKeyUsage=clientAuth'])
  const { publicKey, privateKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
  writeFileSync(p('sa.pub'), publicKey.export({ type: 'spki', format: 'pem' }))
  writeFileSync(p('sa.key'), privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 })
  return {
    dir,
    caCert: p('ca.crt'),
    caKey: p('ca.key'),
    servingCert: p('apiserver.crt'),
    servingKey: p('apiserver.key'),
    adminCert: p('admin.crt'),
    adminKey: p('admin.key'),
    serviceAccountPublicKey: p('sa.pub'),
    serviceAccountPrivateKey: p('sa.key')
  }
}
