/** CLI: writes crds/averagingswarm.yaml from the schema (npm run generate:crd). */
import { writeFileSync } from 'node:fs'
import { CRD_FILE, renderCrdYaml } from './crd-yaml.js'

writeFileSync(CRD_FILE, renderCrdYaml())
console.log(`wrote ${CRD_FILE}`)
