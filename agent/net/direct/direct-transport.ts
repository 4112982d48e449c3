import type { DirectFrameChannel } from '../frame-channel.js'
import { dialDirect, type DirectDialOptions } from './direct-dial.js'
import { DirectServer, type DirectServerOptions } from './direct-server.js'

/** What the direct data channel needs to listen: the server's options, on this thread or on data threads. */
export type DirectListenOptions = Omit<DirectServerOptions, 'accept' | 'reusePort'> & {
  readonly accept: (channel: DirectFrameChannel) => void
}

export interface DirectListener {
  readonly port: number
  close: () => Promise<void>
}

/**
 * Where the direct data channel's sockets live: on the agent's main thread, or spread over data
 * threads that run TLS and framing so that one agent can use more than one core.
 */
export interface DirectTransport {
  /** Worker threads carrying the sockets; 0: the main thread does. */
  readonly threads: number
  dial: (options: DirectDialOptions) => Promise<DirectFrameChannel>
  listen: (options: DirectListenOptions) => Promise<DirectListener>
  /** Drops every connection and listener (the agent is leaving the swarm). */
  close: () => Promise<void>
}

/**
 * An agent's direct data channel server as other protocols than the all-reduce's may use it (state
 * sharing): its port, and the channels that agreed on one of its ALPN ids handed to a handler.
 */
export interface DirectEndpoint {
  readonly port: number
  /** Hands channels of this protocol to accept until the returned function is called. */
  serve: (protocol: string, accept: (channel: DirectFrameChannel) => void) => () => void
}

/** The direct data channel on the calling thread. */
export const mainThreadTransport: DirectTransport = {
  threads: 0,
  dial: dialDirect,
  listen: async (options) => await DirectServer.listen(options),
  close: async () => {}
}
