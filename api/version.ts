/** The API group and version of the AveragingSwarm custom resource, shared by agent and operator. */
export const API_GROUP = 'averaging.swarm.io'
export const API_VERSION = 'v1alpha1'
export const KIND = 'AveragingSwarm'
