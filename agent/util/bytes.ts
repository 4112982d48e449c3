/** Whether two byte arrays hold the same bytes (schema hashes, base ids). */
export function equalBytes (a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false
  return true
}
