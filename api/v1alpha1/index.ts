/** AveragingSwarm v1alpha1: types, defaults, schema and CRD, imported by operator and agent alike. */
export * from './types.js'
export * from './defaults.js'
export { swarmSchema, specSchema, statusSchema, DURATION_PATTERN, MULTIADDR_PATTERN, COMPRESSIONS, WORKLOAD_TYPES } from './schema.js'
export { buildCrd, CRD_NAME, PLURAL, SINGULAR } from './crd.js'
