import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startSwarm, fill, weightedMean } from './swarm-fixture.js'
import { aggregateProtocol } from '../../agent/allreduce/aggregate-protocol.js'
import { aliveProtocol } from '../../agent/matchmaking/join-protocol.js'
import type { StepResult } from '../../agent/averager.js'
import { AgentMetrics } from '../../agent/metrics/agent-metrics.js'
import { AGENT_METRICS as M } from '../../api/metric-names.js'
import { sampleValue } from './metrics-text.js'
import { linesLog } from '../../agent/log.js'
import type { SwarmNode } from '../../agent/net/node.js'
import { rewriteOutgoingFrames } from './frame-rewriter.js'

// A group member that goes quiet: it joins the group, then its parts stop coming, as
// from a process stopped with SIGSTOP (its connections stay open, nothing is reset). With fixed
// timeouts the reducers wait the whole sender timeout; with adaptive deadlines they cut it off
// once the rest of the group delivered and it is far behind their median wait, unless it echoes
// the liveness check they make first (a stopped process answers nothing). The second test
// freezes a member that also reduces a span: the senders give up on its means the same way.

const PREFIX = 'quiet'
/** 1024 float32 values per part, 30 parts per reducer: more than the part window (16). */
const PART_BYTES = 4096
const ELEMENTS = 90 * 1024
const SILENT = 3
/** Fixed timeouts long enough that a round finishing before them cannot be luck. */
const SENDER_TIMEOUT_S = 60
/**
 * The frozen member's test: its own step waits this long for senders that never reach it, so it
 * is shorter than the first test's; the fixed reducer timeout (twice it) is still 5x the adaptive one.
 */
const FROZEN_SENDER_TIMEOUT_S = 20
/** Parts the silent peer delivers to each reducer before it goes quiet (mid-span, not at the start). */
const PARTS_BEFORE_SILENCE = 3

/** What the silent peer lets through on its aggregate streams: frame 0 is the header, then parts. */
let framesLetThrough = Infinity

/**
 * Whether the frozen peer has gone quiet: from its first dropped aggregate frame on, it answers no
 * liveness check either, as a process stopped with SIGSTOP (before, its matchmaking runs as a live
 * agent's).
 */
let quiet = false

/** Drops the silent peer's outgoing aggregate frames past framesLetThrough (as it stood when the stream opened); the stream stays open. */
function silenceAggregateStreams (node: SwarmNode): void {
  rewriteOutgoingFrames(node, aggregateProtocol(PREFIX), () => {
    const limit = framesLetThrough
    return (payload, index) => index < limit ? payload : null
  })
}

/** Liveness checks sent to `node` are held unanswered once it went quiet (`quiet`), answered before. Before the handler is registered. */
function holdAliveWhenQuiet (node: SwarmNode): void {
  const handle = node.handle.bind(node)
  node.handle = (async (protocols: string | string[], handler: Parameters<SwarmNode['handle']>[1], options?: Parameters<SwarmNode['handle']>[2]) => {
    // Held: the stream stays open and unanswered until the asker gives up (a stream closed unanswered is no verdict).
    const whenQuiet: typeof handler = async (...args) => { if (!quiet) await handler(...args); else await new Promise<void>(resolve => { args[0].addEventListener('close', () => { resolve() }, { once: true }) }) }
    await handle(protocols, (Array.isArray(protocols) ? protocols[0] : protocols) === aliveProtocol(PREFIX) ? whenQuiet : handler, options)
  }) as SwarmNode['handle']
}

/** Streams sent to `node` for `protocol` are held open, never read nor answered, as by a stopped process. Before the handler is registered. */
function holdAnsweredStreams (node: SwarmNode, protocol: string): void {
  const handle = node.handle.bind(node)
  node.handle = (async (protocols: string | string[], handler: Parameters<SwarmNode['handle']>[1], options?: Parameters<SwarmNode['handle']>[2]) => {
    const held: typeof handler = () => {}
    await handle(protocols, (Array.isArray(protocols) ? protocols[0] : protocols) === protocol ? held : handler, options)
  }) as SwarmNode['handle']
}

test('a member that goes quiet is cut off by the adaptive deadline, long before the fixed sender timeout, and the others get the exact mean of who delivered', { timeout: 240_000 }, async () => {
  const initial = (p: number): Float32Array => fill(ELEMENTS, p)
  const logs: string[][] = [[], [], [], []]
  const metrics = [0, 1, 2, 3].map(() => new AgentMetrics('quiet'))
  const swarm = await startSwarm(4, {
    prefix: PREFIX,
    tensors: (p) => [{ name: 'w', shape: [ELEMENTS], data: initial(p) }],
    // The silent peer is a client: it sends to every reducer and reduces nothing, so every span
    // has a live reducer and the expected values are exact. Its parts take libp2p streams, where
    // this test drops them.
    config: (p) => ({
      targetGroupSize: 4,
      minGroupSize: 4,
      partSizeBytes: PART_BYTES,
      requestTimeout: 2,
      averagingExpiration: 4,
      allreduceTimeout: 2 * SENDER_TIMEOUT_S,
      senderTimeout: SENDER_TIMEOUT_S,
      ...(p === SILENT ? { mode: 'client' as const, dataChannel: 'libp2p' as const } : {})
    }),
    // A client serves no liveness check (nobody can call it): the check before the cut-off gives no
    // verdict, which proves nothing, and the client is cut off as before.
    hooks: (p) => ({
      log: linesLog((msg) => { logs[p].push(msg); if (process.env.AVS_TEST_LOG != null) console.error(`[peer ${p}] ${msg}`) }),
      // As agent/main.ts records a step.
      onStep: (outcome, detail) => { metrics[p].recordRound(outcome, detail) }
    })
  })
  const honest = [0, 1, 2]
  const silentId = swarm.nodes[SILENT].peerId.toString()
  const honestMean = weightedMean(honest.map(initial), [1, 1, 1])
  const allMean = weightedMean([0, 1, 2, 3].map(initial), [1, 1, 1, 1])
  /** One round from the initial values; the silent peer's step is awaited by the caller. */
  const round = async (letThrough: number): Promise<{ results: StepResult[], silentStep: Promise<unknown> }> => {
    for (let p = 0; p < 4; p++) await swarm.averagers[p].withTensors(t => { t[0].data.set(initial(p)) })
    for (const l of logs) l.length = 0
    framesLetThrough = letThrough
    const silentStep = swarm.averagers[SILENT].step({ timeout: 200 }).catch(err => err as Error)
    const results = await Promise.all(honest.map(async p => await swarm.averagers[p].step({ timeout: 200 })))
    return { results, silentStep }
  }
  const checkCutOff = (results: StepResult[], what: string): void => {
    for (const [p, r] of results.entries()) {
      assert.ok(r.peers.includes(silentId), `${what}: the silent peer was in peer ${p}'s group`)
      assert.deepEqual(r.allreduce.bannedSenders, [silentId], `${what}: peer ${p} left out the silent peer, and only it; logs: ${logs[p].join(' | ')}`)
      assert.deepEqual(r.allreduce.cutOffSenders, { adaptive: [silentId], fixed: [] }, `${what}: peer ${p} cut it off adaptively`)
      assert.ok(r.allreduce.durationMs < SENDER_TIMEOUT_S * 1000, `${what}: peer ${p} finished before the fixed sender timeout would have fired (${r.allreduce.durationMs} ms)`)
      assert.ok(logs[p].some(l => l.includes(silentId) && l.includes('within the adaptive deadline')), `${what}: peer ${p} logged the cut-off`)
    }
  }
  try {
    silenceAggregateStreams(swarm.nodes[SILENT])

    // 1. Quiet mid-span: header and the first parts to each reducer, then nothing.
    const mid = await round(1 + PARTS_BEFORE_SILENCE)
    checkCutOff(mid.results, 'quiet mid-span')
    const values = await Promise.all(honest.map(async p => await swarm.averagers[p].withTensors(t => t[0].data.slice())))
    const perPart = PART_BYTES / 4
    let partsWithSilent = 0
    for (let part = 0; part < ELEMENTS / perPart; part++) {
      // A part's mean either includes the silent peer's values or not, for all its elements (a
      // few elements' two means lie within the tolerance of each other: the part decides).
      const range = Array.from({ length: perPart }, (_, j) => part * perPart + j)
      const included = range.filter(i => Math.abs(values[0][i] - allMean[i]) < 1e-4).length > perPart / 2
      if (included) partsWithSilent++
      const expected = included ? allMean : honestMean
      for (const i of range) {
        // Each part's mean comes from one reducer: every honest peer holds the same value.
        assert.ok(values[1][i] === values[0][i] && values[2][i] === values[0][i], `element ${i}: the honest peers disagree`)
        assert.ok(Math.abs(values[0][i] - expected[i]) < 1e-4, `element ${i} (part ${part}) is ${values[0][i]}, not the ${included ? 'mean with the silent peer' : 'honest mean'} ${expected[i]}`)
      }
    }
    // The parts it delivered before going quiet count, the rest do not: 3 reducers × 3 parts.
    assert.equal(partsWithSilent, honest.length * PARTS_BEFORE_SILENCE, 'the silent peer\'s delivered parts are in the mean, and only those')
    await mid.silentStep

    // 2. Quiet from the start: its streams open but not even the header arrives, so no reducer
    //    ever sees it connect.
    const start = await round(0)
    checkCutOff(start.results, 'quiet from the start')
    for (const p of honest) {
      const got = await swarm.averagers[p].withTensors(t => t[0].data.slice())
      for (let i = 0; i < ELEMENTS; i++) {
        if (Math.abs(got[i] - honestMean[i]) > 1e-4) assert.fail(`quiet from the start: peer ${p} element ${i} is ${got[i]}, not the honest mean ${honestMean[i]}`)
      }
    }
    // Its step waits on reducers that will never answer it: stopping its node ends it.
    await swarm.nodes[SILENT].stop()
    await start.silentStep
    // Two rounds, one adaptive cut-off each, none at a fixed timeout, on every honest reducer.
    for (const p of honest) {
      const text = await metrics[p].registry.metrics()
      assert.equal(sampleValue(text, M.senderCutoffs.name, { deadline: 'adaptive' }), 2, `peer ${p}'s adaptive cut-offs`)
      assert.equal(sampleValue(text, M.senderCutoffs.name, { deadline: 'fixed' }), 0, `peer ${p}'s fixed cut-offs`)
    }
  } finally {
    await swarm.stop()
  }
})

test('a member frozen right after its group formed is cut off as sender and as reducer by the adaptive deadlines, and the other three average its span among themselves after the round', { timeout: 240_000 }, async () => {
  const initial = (p: number): Float32Array => fill(ELEMENTS, p)
  const logs: string[][] = [[], [], [], []]
  const metrics = [0, 1, 2, 3].map(() => new AgentMetrics('frozen'))
  quiet = false
  const swarm = await startSwarm(4, {
    prefix: PREFIX,
    tensors: (p) => [{ name: 'w', shape: [ELEMENTS], data: initial(p) }],
    // The frozen peer is a full member (it reduces a span) whose channels are libp2p streams,
    // where this test silences them: its parts are dropped and the streams sent to it are never
    // answered, as from a process stopped with SIGSTOP once the group formed.
    config: (p) => ({
      targetGroupSize: 4,
      minGroupSize: 4,
      partSizeBytes: PART_BYTES,
      requestTimeout: 2,
      averagingExpiration: 4,
      allreduceTimeout: 4 * FROZEN_SENDER_TIMEOUT_S,
      senderTimeout: FROZEN_SENDER_TIMEOUT_S,
      ...(p === SILENT ? { dataChannel: 'libp2p' as const } : {})
    }),
    hooks: (p, nodes) => {
      if (p === SILENT) {
        rewriteOutgoingFrames(nodes[p], aggregateProtocol(PREFIX), () => () => { quiet = true; return null })
        holdAnsweredStreams(nodes[p], aggregateProtocol(PREFIX))
        holdAliveWhenQuiet(nodes[p])
      }
      return {
        log: linesLog((msg) => { logs[p].push(msg); if (process.env.AVS_TEST_LOG != null) console.error(`[peer ${p}] ${msg}`) }),
        onStep: (outcome, detail) => { metrics[p].recordRound(outcome, detail) }
      }
    }
  })
  const honest = [0, 1, 2]
  const frozenId = swarm.nodes[SILENT].peerId.toString()
  const honestMean = weightedMean(honest.map(initial), [1, 1, 1])
  try {
    const frozenStep = swarm.averagers[SILENT].step({ timeout: 200 }).catch(err => err as Error)
    const results = await Promise.all(honest.map(async p => await swarm.averagers[p].step({ timeout: 200 })))
    // The averager's fixed reducer timeout: twice the sender timeout.
    const reducerTimeoutMs = 2 * FROZEN_SENDER_TIMEOUT_S * 1000
    for (const [p, r] of results.entries()) {
      assert.ok(r.peers.includes(frozenId), `the frozen peer was in peer ${p}'s group`)
      assert.deepEqual(r.allreduce.cutOffSenders, { adaptive: [frozenId], fixed: [] }, `peer ${p} cut it off as a sender adaptively; logs: ${logs[p].join(' | ')}`)
      assert.deepEqual(r.allreduce.cutOffReducers, { adaptive: [frozenId], fixed: [] }, `peer ${p} cut it off as a reducer adaptively; logs: ${logs[p].join(' | ')}`)
      assert.deepEqual(r.allreduce.failedReducers, [frozenId], `peer ${p} gave up on the frozen reducer and only on it`)
      assert.ok(r.allreduce.durationMs < reducerTimeoutMs / 2, `peer ${p} finished long before the fixed reducer timeout (${reducerTimeoutMs} ms): ${r.allreduce.durationMs} ms`)
      // Whichever came first: its stream not accepted while the others had (ReducerDeadlines.accepted), no mean
      // once they had answered, or (for a member that reduces a span) its silence as a sender, unanswered checks included.
      assert.ok(logs[p].some(l => ((l.includes(`reducer ${frozenId} did not accept our stream`) || l.includes(`reducer ${frozenId} sent no mean`)) &&
          (l.includes('adaptive deadline') || l.includes('did not answer a liveness check'))) ||
        l.includes(`reducer ${frozenId} owes us its acceptance of our stream, and as a sender it was silent and did not answer a liveness check`)), `peer ${p} logged why it gave up on the frozen reducer: ${logs[p].join(' | ')}`)
    }
    // Every element holds the honest mean: the spans the honest peers reduced in the round, the frozen
    // peer's span (about a quarter of the parts, equal bandwidths) in the repair after it.
    const values = await Promise.all(honest.map(async p => await swarm.averagers[p].withTensors(t => t[0].data.slice())))
    for (let i = 0; i < ELEMENTS; i++) {
      if (!values.every(v => Math.abs(v[i] - honestMean[i]) < 1e-4)) assert.fail(`element ${i}: not the honest mean ${honestMean[i]} (${values.map(v => v[i]).join(', ')})`)
    }
    const parts = Math.ceil(ELEMENTS * 4 / PART_BYTES)
    for (const [p, r] of results.entries()) {
      assert.equal(r.allreduce.partsKeptLocal, 0, `peer ${p} kept no part local`)
      assert.ok(r.allreduce.repairedParts > parts / 8 && r.allreduce.repairedParts < parts / 2, `peer ${p} repaired ${r.allreduce.repairedParts} of ${parts} parts: the frozen reducer's span, about a quarter`)
    }
    for (const p of honest) {
      const text = await metrics[p].registry.metrics()
      assert.equal(sampleValue(text, M.reducerCutoffs.name, { deadline: 'adaptive' }), 1, `peer ${p}'s adaptive reducer cut-offs`)
      assert.equal(sampleValue(text, M.reducerCutoffs.name, { deadline: 'fixed' }), 0, `peer ${p}'s fixed reducer cut-offs`)
    }
    await swarm.nodes[SILENT].stop()
    await frozenStep
  } finally {
    await swarm.stop()
  }
})

/** Holds everything the first stream `node` dials for `protocol` sends past its first `afterBytes`, for `ms`, then lets it through in order: one flow stalled, as behind a congested link. */
function stallFirstStream (node: SwarmNode, protocol: string, afterBytes: number, ms: number): void {
  const dial = node.dialProtocol.bind(node)
  let stalled = false
  node.dialProtocol = (async (peer: Parameters<SwarmNode['dialProtocol']>[0], protocols: string | string[], options?: Parameters<SwarmNode['dialProtocol']>[2]) => {
    const stream = await dial(peer, protocols, options)
    if ((Array.isArray(protocols) ? protocols[0] : protocols) !== protocol || stalled) return stream
    stalled = true
    const send = stream.send.bind(stream)
    let passed = 0
    let held: Array<Parameters<typeof send>[0]> | null = null
    let released = false
    stream.send = (data) => {
      if (released) return send(data)
      if (held == null && passed + data.byteLength <= afterBytes) { passed += data.byteLength; return send(data) }
      if (held == null) {
        held = []
        setTimeout(() => {
          released = true
          // The member may have given up on the stream meanwhile (what the test checks it does not do).
          try { for (const d of held!) send(d) } catch {}
          held = null
        }, ms)
      }
      held.push(data)
      return true
    }
    return stream
  }) as SwarmNode['dialProtocol']
}

for (const { what, afterBytes } of [
  { what: 'its parts', afterBytes: 3 * PART_BYTES },
  // The header held: the reducer cannot accept the stream, and the member judges the reducer late.
  { what: 'its header', afterBytes: 0 }
]) {
test(`a member whose flow to one reducer stalls for seconds (${what}), but who answers its liveness check, is waited for: no cut-off, the exact mean`, { timeout: 120_000 }, async () => {
  const prefix = afterBytes > 0 ? 'stall' : 'stall-header'
  const STALLED = 2
  const STALL_MS = 5000
  const initial = (p: number): Float32Array => fill(ELEMENTS, p)
  const logs: string[][] = [[], [], [], []]
  const swarm = await startSwarm(4, {
    prefix,
    tensors: (p) => [{ name: 'w', shape: [ELEMENTS], data: initial(p) }],
    // Its parts take libp2p streams, where the test holds one of them; a request timeout of 1 s puts the
    // adaptive limit at ~2 s, well inside the 5 s stall and far from the fixed timeouts.
    config: (p) => ({
      targetGroupSize: 4,
      minGroupSize: 4,
      partSizeBytes: PART_BYTES,
      requestTimeout: 1,
      averagingExpiration: 4,
      allreduceTimeout: 2 * SENDER_TIMEOUT_S,
      senderTimeout: SENDER_TIMEOUT_S,
      ...(p === STALLED ? { dataChannel: 'libp2p' as const } : {})
    }),
    hooks: (p, nodes) => {
      if (p === STALLED) stallFirstStream(nodes[p], aggregateProtocol(prefix), afterBytes, STALL_MS)
      return { log: linesLog((msg) => { logs[p].push(msg); if (process.env.AVS_TEST_LOG != null) console.error(`[peer ${p}] ${msg}`) }) }
    }
  })
  try {
    const results = await Promise.all([0, 1, 2, 3].map(async p => await swarm.averagers[p].step({ timeout: 100 })))
    const all = logs.flat()
    for (const [p, r] of results.entries()) {
      assert.equal(r.peers.length, 4, `peer ${p} averaged in the group of four`)
      assert.deepEqual([r.allreduce.bannedSenders, r.allreduce.failedReducers, r.allreduce.partsKeptLocal], [[], [], 0], `peer ${p} cut nobody off and kept nothing local; logs: ${logs[p].join(' | ')}`)
    }
    assert.ok(Math.max(...results.map(r => r.allreduce.durationMs)) >= STALL_MS - 500, 'the stall held the round (the test stalled a flow that mattered)')
    // Checked, it answered; or bytes it sent us in its other role while the check ran answered for it.
    assert.ok(all.some(l => l.includes('late, answered a liveness check: waiting on') || l.includes('late, sent us bytes while we checked: alive, waiting on')), `a late member was checked and waited for: ${all.filter(l => l.includes('liveness') || l.includes('adaptive') || l.includes('sent us bytes')).join(' | ')}`)
    const mean = weightedMean([0, 1, 2, 3].map(initial), [1, 1, 1, 1])
    for (let p = 0; p < 4; p++) {
      const got = await swarm.averagers[p].withTensors(t => t[0].data.slice())
      for (let i = 0; i < ELEMENTS; i++) {
        if (Math.abs(got[i] - mean[i]) > 1e-4) assert.fail(`peer ${p} element ${i} is ${got[i]}, not the mean ${mean[i]}`)
      }
    }
  } finally {
    await swarm.stop()
  }
})
}
