import type { PeerId, Stream } from '@libp2p/interface'
import type { SwarmNode } from '../net/node.js'
import { MatchmakingError, describeError } from '../errors.js'
import type { Log } from '../log.js'
import { aliveProtocol, MAX_ALIVE_STREAMS_PER_CONNECTION } from './join-protocol.js'
import { awakeTimeout } from '../util/awake-timeout.js'
import { Silences } from './silences.js'

/** A liveness check that failed at once (a dial refused, a stream limit) is tried again after this, within its request timeout. */
const CHECK_RETRY_MS = 50
/**
 * How long an answered check's stream may stay open before we abort it, in request timeouts: its
 * asker closes it once it read the answer, which on a congested link comes seconds after we sent it.
 * A bound of one request timeout (2 s) reset streams whose answer was still queued behind parts, and
 * the reset, right behind it, failed the asker's negotiation (bench:links under load, one run in 8:
 * "The stream has been reset" after 7.2 s). Five cover the longest an asker waits for the answer
 * there (check-budget.ts: a request timeout plus two yamux windows each way at the flow's rate,
 * ~7 s at 10 Mbit/s with 2-s requests); a peer that opens the stream and never closes it holds it
 * no longer than that (the fuzz harness's idle streams).
 */
const ANSWERED_HOLD_REQUESTS = 5
/** The liveness protocol's answer. */
const ALIVE = new Uint8Array([1])

/** Read afresh (a signal's state changes across awaits, which TypeScript's narrowing does not see). */
function aborted (signal: AbortSignal | undefined): boolean { return signal?.aborted === true }

/**
 * Both sides of matchmaking's liveness check (`/avs/<prefix>/alive/1.0.0`: one byte, sent as the
 * stream opens): whether a leader we follow, or a peer we see looking, is still there. Not libp2p's
 * ping, whose one outbound stream per connection is shared with libp2p's connection monitor
 * (RELIABILITY.md).
 */
export class Liveness {
  /** What the checks found (and what other requests found: Silences), for later searches. */
  readonly silences = new Silences()

  constructor (
    private readonly node: SwarmNode,
    private readonly prefix: string,
    private readonly log?: Log,
    /** Unix seconds, the matchmaker's clock (Silences). */
    private readonly now: () => number = () => Date.now() / 1000
  ) {}

  /** Answers others' checks as their streams open; one still open ANSWERED_HOLD_REQUESTS request timeouts later is aborted. */
  async serve (requestTimeoutMs: number): Promise<void> {
    const holdMs = ANSWERED_HOLD_REQUESTS * requestTimeoutMs
    // Answers as soon as the stream is negotiated; the asker tears the stream down once answered.
    // Not an echo of the asker's byte: that byte comes a round trip after the negotiation, and where
    // the connection also carries an all-reduce's parts (libp2p data path) it queued behind them for
    // seconds, past the 2-s bound we then put on the stream, so every check of a member on a
    // congested connection ended unanswered (4 agents on 10 Mbit/s links, bench:links: 23 checks,
    // 23 "closed unanswered" after 2.1–5.2 s). Answered at once, the check is the one round trip
    // check-budget.ts allows for. An asker from before this still sends its byte, and reads the
    // answer whenever it comes (a stream buffers what arrives before its reader).
    // Our end is closed only once the asker's byte came, never with the answer: a close that reached
    // the asker with it, before its negotiation had put back the byte read past the protocol's name,
    // closed its readable end first and failed the check ("Cannot push data onto a stream that is
    // closed", bench:links under load).
    await this.node.handle(aliveProtocol(this.prefix), (stream) => {
      const bound = setTimeout(() => { stream.abort(new MatchmakingError('liveness stream left open past its hold')) }, holdMs)
      stream.addEventListener('close', () => { clearTimeout(bound) }, { once: true })
      stream.addEventListener('message', () => { stream.close().catch(() => {}) }, { once: true })
      try { stream.send(ALIVE) } catch {}
    }, { maxInboundStreams: MAX_ALIVE_STREAMS_PER_CONNECTION, maxOutboundStreams: MAX_ALIVE_STREAMS_PER_CONNECTION, runOnLimitedConnection: false })
  }

  async unserve (): Promise<void> {
    await this.node.unhandle(aliveProtocol(this.prefix)).catch(() => {})
  }

  /**
   * Whether `peer` answers a liveness check (aliveProtocol: one byte as the stream opens, which a live
   * agent sends on its event loop whatever its matchmaking waits on) within `withinMs`, counted in time our
   * own event loop was awake (awake-timeout.ts): false only when a check was outstanding that long
   * without an answer (a frozen process, which does not even complete
   * the protocol negotiation), or when every attempt for that long failed at once with no
   * connection to it (a refused dial: a killed one). A failure at once while connected, and a peer
   * that does not speak the protocol (an agent from before it), answered: alive, or no verdict.
   * True when `signal` aborts first (no verdict).
   */
  async answers (peer: PeerId, withinMs: number, signal?: AbortSignal): Promise<boolean> {
    return await this.check(peer, withinMs, signal) !== 'silent'
  }

  /**
   * The check itself: 'answered' (the peer answered), 'silent' (see answers: no answer, or no
   * connection, for withinMs) or 'no verdict' (it does not speak the protocol, as a client-mode
   * agent that serves nothing; a failure at once while connected; `signal` aborted).
   */
  async check (peer: PeerId, withinMs: number, signal?: AbortSignal): Promise<'answered' | 'silent' | 'no verdict'> {
    const verdict = await this.verdict(peer, withinMs, signal)
    if (verdict === 'silent') this.silences.noteSilent(peer.toString(), this.now())
    else if (verdict === 'answered') this.silences.noteAlive(peer.toString(), this.now())
    return verdict
  }

  private async verdict (peer: PeerId, withinMs: number, signal?: AbortSignal): Promise<'answered' | 'silent' | 'no verdict'> {
    const started = Date.now()
    for (;;) {
      if (aborted(signal)) return 'no verdict'
      // Counted in time we were awake to read the answer (a stall of ours is no silence of theirs).
      const timer = awakeTimeout(withinMs)
      const timeout = timer.signal
      const any = signal != null ? AbortSignal.any([timeout, signal]) : timeout
      let stream: Stream | undefined
      try {
        stream = await this.node.dialProtocol(peer, aliveProtocol(this.prefix), { signal: any })
        const opened = stream
        const answered = await new Promise<boolean>(resolve => {
          const done = (answer: boolean): void => {
            opened.removeEventListener('message', yes)
            opened.removeEventListener('close', no)
            any.removeEventListener('abort', no)
            resolve(answer)
          }
          const yes = (): void => { done(true) }
          const no = (): void => { done(false) }
          opened.addEventListener('message', yes)
          opened.addEventListener('close', no)
          any.addEventListener('abort', no)
          // Agents from before answering at once wait for this byte before they answer.
          opened.send(ALIVE)
        })
        if (answered) return 'answered'
        if (aborted(signal)) return 'no verdict'
        if (timeout.aborted) return 'silent'
        this.log?.debug(`liveness check of ${peer.toString().slice(-6)} closed unanswered after ${Date.now() - started} ms`)
      } catch (err) {
        if (aborted(signal)) return 'no verdict'
        if (err instanceof Error && err.name === 'UnsupportedProtocolError') return 'no verdict'
        if (timeout.aborted) return 'silent'
        this.log?.debug(`liveness check of ${peer.toString().slice(-6)} failed after ${Date.now() - started} ms: ${describeError(err)}`)
      } finally {
        timer.clear()
        // Torn down at once: a graceful close would wait for the peer, and hold a stream of the protocol's bound.
        stream?.abort(new MatchmakingError('liveness checked'))
      }
      // Failed at once while connected: the peer's stack answered (a stream reset, a refusal) or
      // ours refused (a stream limit). No verdict: only silence, or no connection at all, is gone.
      if (this.node.getConnections(peer).length > 0) return 'no verdict'
      if (Date.now() - started >= withinMs) return 'silent'
      await new Promise(resolve => setTimeout(resolve, CHECK_RETRY_MS))
    }
  }

  /**
   * Resolves 'gone' once `leader` (the leader we follow) did not answer a liveness check within
   * `requestMs`; checks every half of it while `signal` is not aborted (then it never resolves).
   */
  async gone (leader: PeerId, requestMs: number, signal: AbortSignal): Promise<'gone'> {
    return await new Promise<'gone'>(resolve => {
      void (async () => {
        while (signal.aborted !== true) {
          await new Promise<void>(resolve => {
            const stop = (): void => { clearTimeout(timer); resolve() }
            const timer = setTimeout(() => { signal.removeEventListener('abort', stop); resolve() }, requestMs / 2)
            signal.addEventListener('abort', stop, { once: true })
          })
          if (signal.aborted) return
          if (!(await this.answers(leader, requestMs, signal))) { resolve('gone'); return }
        }
      })()
    })
  }
}
