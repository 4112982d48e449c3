/** Renders the CRD as the YAML committed in crds/averagingswarm.yaml. */
import { stringify } from 'yaml'
import { buildCrd } from './crd.js'

export const CRD_FILE = 'crds/averagingswarm.yaml'

export function renderCrdYaml (): string {
  const header = '# Generated from api/v1alpha1/schema.ts by `npm run generate:crd`. Do not edit by hand.\n'
  return header + stringify(buildCrd(), { lineWidth: 0 })
}
