/** Protocol ids are namespaced by the averaging prefix, as hivemind namespaces its RPC names. */
export function joinProtocol (prefix: string): string {
  return `/avs/${prefix}/join/1.0.0`
}

export const MAX_JOIN_REQUEST_BYTES = 64 * 1024
/** A BEGIN_ALLREDUCE carries every member's id and gathered data. */
export const MAX_LEADER_MESSAGE_BYTES = 8 * 1024 * 1024
