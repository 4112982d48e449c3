/** Protocol ids are namespaced by the averaging prefix, as hivemind namespaces its RPC names. */
export function joinProtocol (prefix: string): string {
  return `/avs/${prefix}/join/1.0.0`
}

export const MAX_JOIN_REQUEST_BYTES = 64 * 1024
/** A BEGIN_ALLREDUCE carries every member's id and gathered data. */
export const MAX_LEADER_MESSAGE_BYTES = 8 * 1024 * 1024
/**
 * A follower asks one leader at a time; a redirect or a retry may overlap the stream it is
 * leaving. More than this from one peer at once is hostile and is reset unread.
 */
export const MAX_JOIN_STREAMS_PER_PEER = 4
/**
 * Per connection (libp2p's bound). libp2p counts streams until both sides closed them, so a
 * follower asking again right after a rejection still has its last stream counted: keep room.
 */
export const MAX_JOIN_STREAMS_PER_CONNECTION = 32

/**
 * Liveness: one byte sent as the stream opens, on the event loop with no lock or matchmaking
 * state behind it. Its own protocol rather than libp2p's ping, which allows one outbound stream
 * per connection, shared with libp2p's connection monitor: a monitor ping hanging on a frozen peer,
 * or a previous ping's stream still closing (seen for seconds at 64 agents in one process), refused
 * ours exactly when a verdict was needed.
 */
export function aliveProtocol (prefix: string): string {
  return `/avs/${prefix}/alive/1.0.0`
}

/** Per connection, each way: a follower checks its leader one stream at a time, a leader probes each missing peer once. */
export const MAX_ALIVE_STREAMS_PER_CONNECTION = 8
