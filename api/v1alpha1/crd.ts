/**
 * The AveragingSwarm CustomResourceDefinition as an object, built from the schema in schema.ts.
 * generate-crd.ts writes it to crds/averagingswarm.yaml; the chart and the tests read that file.
 */
import { API_GROUP, API_VERSION, KIND } from '../version.js'
import { prune } from './schema-builders.js'
import { swarmSchema } from './schema.js'

export const PLURAL = 'averagingswarms'
export const SINGULAR = 'averagingswarm'
export const SHORT_NAMES = ['avs']
export const CRD_NAME = `${PLURAL}.${API_GROUP}`

export function buildCrd (): Record<string, unknown> {
  return prune({
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: CRD_NAME, labels: { 'app.kubernetes.io/name': 'averaging-swarm', 'app.kubernetes.io/component': 'crd' } },
    spec: {
      group: API_GROUP,
      scope: 'Namespaced',
      names: { kind: KIND, listKind: `${KIND}List`, plural: PLURAL, singular: SINGULAR, shortNames: SHORT_NAMES, categories: ['averaging', 'all'] },
      versions: [{
        name: API_VERSION,
        served: true,
        storage: true,
        schema: { openAPIV3Schema: swarmSchema },
        subresources: {
          status: {},
          scale: { specReplicasPath: '.spec.replicas', statusReplicasPath: '.status.replicas', labelSelectorPath: '.status.selector' }
        },
        additionalPrinterColumns: [
          { name: 'Desired', type: 'integer', jsonPath: '.spec.replicas', description: 'Agents wanted.' },
          { name: 'Ready', type: 'integer', jsonPath: '.status.readyReplicas', description: 'Agents Ready.' },
          { name: 'Rounds', type: 'integer', jsonPath: '.status.roundsCompleted', description: 'Averaging rounds completed.' },
          { name: 'Checkpoint', type: 'integer', jsonPath: '.status.checkpoint.round', description: 'Round of the newest durable checkpoint.' },
          { name: 'Phase', type: 'string', jsonPath: '.status.phase', description: 'Summary of the conditions; Succeeded once Complete, Failed past spec.backoffLimit.' },
          { name: 'Completed', type: 'date', jsonPath: '.status.completionTime', description: 'When the swarm became Complete.', priority: 1 },
          { name: 'Failed', type: 'date', jsonPath: '.status.failureTime', description: 'When the swarm became Failed (spec.backoffLimit exceeded).', priority: 1 },
          { name: 'Group', type: 'integer', jsonPath: '.spec.averaging.targetGroupSize', description: 'Target group size.', priority: 1 },
          { name: 'Image', type: 'string', jsonPath: '.spec.image', description: 'Agent image.', priority: 1 },
          { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' }
        ]
      }]
    }
  })
}
