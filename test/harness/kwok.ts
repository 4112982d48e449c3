/**
 * kwok for scale tests: fake Nodes whose pods go Running/Ready without running anything. The
 * harness creates the Nodes (same GPU shape as the test kubelet's, plus the annotation
 * kwok.x-k8s.io/node=fake) and runs one kwok controller that manages exactly those.
 */
import { join } from 'node:path'
import { CoreV1Api, type KubeConfig } from '@kubernetes/client-node'
import { binary } from './paths.js'
import { freePort } from '../../agent/util/ports.js'
import { rfc3339 } from './time.js'
import { startGroupProcess, type GroupProcess } from './process-group.js'
import { nodeObject, type NodeShape } from './kubelet/node-object.js'

export const KWOK_ANNOTATION = 'kwok.x-k8s.io/node'

export interface Kwok { readonly process: GroupProcess, stop: () => Promise<void> }

export async function startKwok (kc: KubeConfig, kubeconfigPath: string, nodes: readonly NodeShape[], logDir: string): Promise<Kwok> {
  const core = kc.makeApiClient(CoreV1Api)
  const port = await freePort()
  const process = startGroupProcess({
    command: binary('kwok'),
    args: [`--kubeconfig=${kubeconfigPath}`, `--manage-nodes-with-annotation-selector=${KWOK_ANNOTATION}=fake`,
      '--node-lease-duration-seconds=40', `--server-address=127.0.0.1:${port}`, '--cidr=10.244.0.0/16', '--node-ip=127.0.0.1'],
    logFile: join(logDir, 'kwok.log')
  })
  for (const shape of nodes) {
    await core.createNode({ body: nodeObject({ ...shape, annotations: { ...shape.annotations, [KWOK_ANNOTATION]: 'fake' } }, rfc3339()) })
  }
  return { process, stop: async () => { await process.stop(3000) } }
}
