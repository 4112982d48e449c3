/** The test-cluster harness: import from here (see README.md). */
export { startCluster, type Cluster, type ClusterOptions } from './cluster.js'
export { controlPlaneBuilt, binDir, binary, kubernetesVersion, repoRoot } from './paths.js'
export { waitFor } from './wait.js'
export { GPU_RESOURCE } from './kubelet/node-object.js'
export { DEFAULT_IMAGES, type ImageTable, type ImageEntrypoint } from './kubelet/images.js'
export { runAllTeardowns } from './cleanup.js'
export { hostPathClaim, hostPathVolumeFor } from './claims.js'
