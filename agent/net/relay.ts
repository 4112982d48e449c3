import { circuitRelayServer, RELAY_V2_HOP_CODEC } from '@libp2p/circuit-relay-v2'
import type { Connection, Stream, StreamHandler } from '@libp2p/interface'

export { RELAY_V2_HOP_CODEC }

/** What a serving relay allows its members (AVS_RELAY_* in api/agent-env.ts). */
export interface RelayServeOptions {
  readonly maxReservations: number
  /** Bytes one relayed connection may carry, both directions together. */
  readonly circuitBytes: number
  readonly circuitDurationMs: number
  /** Called with every chunk of relayed bytes and the peer that opened the circuit. */
  readonly onRelayed?: (bytes: number, source: string) => void
}

/**
 * The hop service. Its reservations carry no limit on purpose: js-libp2p 3 marks a relayed
 * connection with limits as "limited", never hands a limited connection back from a dial
 * (connection-manager/utils.js findExistingConnection: `limits == null`), so every stream would
 * dial a fresh circuit, and refuses every protocol not registered with runOnLimitedConnection.
 * The relay enforces its bounds itself instead (relayLimits below): unseen by the endpoints,
 * who see a connection close and dial again, as after any network fault.
 */
export function relayServer (options: RelayServeOptions): ReturnType<typeof circuitRelayServer> {
  const server = circuitRelayServer({
    reservations: { maxReservations: options.maxReservations, applyDefaultLimit: false }
  })
  // The service registers its hop handler itself: hand it a registrar that wraps that handler.
  // Not libp2p's stream middleware (node.use): in libp2p 3.3.11 every inbound stream pushes the
  // handler onto the protocol's stored middleware array (connection.js onIncomingStream), so the
  // n-th hop stream ran the relay's handler n times and circuits carried garbage.
  return (components) => server(new Proxy(components, {
    get: (target, name) => name === 'registrar' ? withCountedHop(target.registrar, options) : Reflect.get(target, name)
  }))
}

type Registrar = Parameters<ReturnType<typeof circuitRelayServer>>[0]['registrar']

function withCountedHop (registrar: Registrar, options: RelayServeOptions): Registrar {
  return new Proxy(registrar, {
    get: (target, name) => {
      if (name !== 'handle') {
        const value = Reflect.get(target, name)
        return typeof value === 'function' ? value.bind(target) : value
      }
      return async (protocol: string, handler: StreamHandler, opts?: object) => {
        const counted: StreamHandler = protocol === RELAY_V2_HOP_CODEC
          ? async (stream: Stream, connection: Connection) => { relayLimits(stream, connection, options); await handler(stream, connection) }
          : handler
        await target.handle(protocol, counted, opts)
      }
    }
  })
}

/**
 * On every hop stream: a CONNECT's hop stream becomes one half of the relayed
 * pipe, so bytes read from it travel source -> destination and bytes sent on it travel back.
 * Counts both (averaging_relayed_bytes_total) and aborts the circuit past its data or time
 * budget. Hooks dispatchEvent rather than adding a 'message' listener, which would start the
 * stream's flow before the relay's own reader attaches (as @libp2p/prometheus-metrics does).
 */
function relayLimits (stream: Stream, connection: Connection, options: RelayServeOptions): void {
  const source = connection.remotePeer.toString()
  let carried = 0
  const count = (bytes: number): void => {
    carried += bytes
    options.onRelayed?.(bytes, source)
    if (carried > options.circuitBytes) stream.abort(new Error(`relayed connection carried more than ${options.circuitBytes} bytes`))
  }
  watchBytes(stream, count)
  const timer = setTimeout(() => { stream.abort(new Error(`relayed connection lived longer than ${options.circuitDurationMs} ms`)) }, options.circuitDurationMs)
  timer.unref()
  stream.addEventListener('close', () => { clearTimeout(timer) }, { once: true })
}

function watchBytes (stream: Stream, count: (bytes: number) => void): void {
  const dispatch = stream.dispatchEvent.bind(stream)
  stream.dispatchEvent = (evt: Event): boolean => {
    if (evt.type === 'message') count((evt as Event & { data: { byteLength: number } }).data.byteLength)
    return dispatch(evt)
  }
  const send = stream.send.bind(stream)
  stream.send = (data) => {
    count(data.byteLength)
    return send(data)
  }
}
