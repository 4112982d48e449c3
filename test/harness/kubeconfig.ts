/** Writes kubeconfig files that both the real kubectl and @kubernetes/client-node load. */
import { readFileSync, writeFileSync } from 'node:fs'
import { stringify } from 'yaml'

export interface KubeconfigUser {
  readonly name: string
  readonly clientCertFile?: string
  readonly clientKeyFile?: string
  readonly token?: string
}

export function kubeconfigYaml (server: string, caCertFile: string, user: KubeconfigUser, contextName = 'averaging-swarm-test', namespace?: string): string {
  const b64 = (file: string): string => readFileSync(file).toString('base64')
  const credentials: Record<string, string> = {}
  if (user.clientCertFile !== undefined) credentials['client-certificate-data'] = b64(user.clientCertFile)
  if (user.clientKeyFile !== undefined) credentials['client-key-data'] = b64(user.clientKeyFile)
  if (user.token !== undefined) credentials.token = user.token
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: contextName, cluster: { server, 'certificate-authority-data': b64(caCertFile) } }],
    users: [{ name: user.name, user: credentials }],
    contexts: [{ name: contextName, context: { cluster: contextName, user: user.name, ...(namespace !== undefined ? { namespace } : {}) } }],
    'current-context': contextName
  })
}

export function writeKubeconfig (path: string, server: string, caCertFile: string, user: KubeconfigUser, namespace?: string): string {
  writeFileSync(path, kubeconfigYaml(server, caCertFile, user, undefined, namespace), { mode: 0o600 })
  return path
}
