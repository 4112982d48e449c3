export { SafetensorsError, MAX_HEADER_BYTES, encodeHeader, parseHeader, parseHeaderLength } from './format.js'
export type { Header, SafetensorsDtype, TensorEntry } from './format.js'
export { SafetensorsReader, writeSafetensors } from './safetensors.js'
export type { TensorSource, WriteResult } from './safetensors.js'
export {
  CheckpointError, CheckpointTakenError, DEFAULT_KEEP, MANIFEST_FORMAT, dataName, listCheckpoints, loadNewestCheckpoint, manifestName, readManifest,
  swarmDir, verifyCheckpoint, writeCheckpoint
} from './checkpoint.js'
export type { CheckpointSchema, LoadedCheckpoint, Manifest, ManifestTensor, Skipped, WriteCheckpointOptions } from './checkpoint.js'
export { Checkpointer, type CheckpointLog, type CompletedRound, type Snapshot } from './checkpointer.js'
