import type { Connection, Transport } from '@libp2p/interface'
import { isCircuit } from './reach.js'

type TransportFactory = (components: any) => Transport

/**
 * Keeps relayed connections that js-libp2p would drop as "duplicates" of the peer's own.
 *
 * Two members behind NAT that dial each other through the same relay at the same moment (a
 * round's start, where every member opens a stream to every reducer) each end up with an
 * outbound circuit and an inbound one. Both carry the same remote address: the dialled one is
 * `<relay>/p2p-circuit/p2p/<peer>` from the peer's announced addresses, the inbound one is
 * `<our connection to the relay>/p2p-circuit/p2p/<peer>` (circuit-relay-v2 transport onStop), and
 * those name the relay the same way. When the dial returns, libp2p's connection manager
 * (openConnection, "make sure we don't already have a connection to this multiaddr") finds the
 * inbound circuit under the same address, aborts the circuit it has just dialled with
 * 'Duplicate multiaddr connection' and hands the inbound one to its caller. That circuit is
 * the peer's inbound one, which the peer may be aborting the same way, and every other caller
 * that joined the same dial (the dial queue merges concurrent dials to one peer) now holds an
 * aborted connection and fails with ConnectionClosedError 'Remote closed connection during
 * opening' (relay test: a sender's channel to a reducer failed so, and the reducer left it out).
 *
 * (libp2p 3.3.11: dist/src/connection-manager/index.js 308-333; circuit-relay-v2 4.2.13:
 * dist/src/transport/index.js 155 and 272.)
 *
 * Crossed dials over TCP never look alike (an inbound connection comes from an ephemeral port)
 * and both connections stay; the same is right for circuits. Concurrent dials of our own to one
 * peer are merged by the dial queue, so for a circuit that abort only ever hits a crossed dial:
 * this wraps the circuit transport so that the connections it dials ignore that one abort.
 */
export function keepCrossedCircuits (factory: TransportFactory): TransportFactory {
  return (components) => factory(new Proxy(components, {
    get: (target, name) => name === 'upgrader' ? keepingUpgrader(target.upgrader) : Reflect.get(target, name)
  }))
}

type Upgrader = { upgradeOutbound: (...args: any[]) => Promise<Connection> } & Record<string | symbol, any>

function keepingUpgrader (upgrader: Upgrader): Upgrader {
  return new Proxy(upgrader, {
    get: (target, name) => {
      if (name === 'upgradeOutbound') {
        return async (...args: any[]): Promise<Connection> => {
          const connection = await target.upgradeOutbound(...args)
          if (isCircuit(connection.remoteAddr)) ignoreDuplicateAbort(connection)
          return connection
        }
      }
      const value = Reflect.get(target, name)
      return typeof value === 'function' ? value.bind(target) : value
    }
  })
}

/** The error libp2p's connection manager aborts a dialled connection with when another one has its remote address. */
export function isDuplicateAbort (err: unknown): boolean {
  return err instanceof Error && err.name === 'InvalidMultiaddrError' && err.message === 'Duplicate multiaddr connection'
}

function ignoreDuplicateAbort (connection: Connection): void {
  const abort = connection.abort.bind(connection)
  connection.abort = (err: Error): void => {
    if (isDuplicateAbort(err)) {
      connection.log('keeping a relayed connection libp2p took for a duplicate of the peer\'s crossed dial')
      return
    }
    abort(err)
  }
}
