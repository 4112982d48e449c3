/**
 * A newcomer's state download (hivemind's load_state_from_peers) from one donor in another
 * process, over loopback: how long a restarted agent of a large model waits for the swarm's state,
 * and what the transfer costs each side's CPU (the donor is a live agent, averaging meanwhile),
 * over the donor's direct data channel (TLS from node:tls) and over a libp2p stream (TCP, Noise,
 * yamux), alternating. Every value received is checked against the one sent.
 * Path `hivemind` (opt-in) is the same measurement with hivemind 1.1.12 itself: a donor and a newcomer
 * process of bench/peers/hivemind_state.py (its DecentralizedAverager.load_state_from_peers, hivemind's
 * defaults: no compression, 64 KiB parts), their CPU counting their DHT, averager and p2pd processes.
 *
 * --into: the newcomer downloads into zero tensors it allocated before (the sidecar's way: into its averager's).
 * With --mbit, each side runs in a network namespace of its own, its link shaped to that rate both ways
 * (tc tbf, as bench:links builds them; root needed; no added delay, this kernel has no netem).
 *
 *   npm run bench:state-download
 *   node_modules/.bin/node dist/bench/state-download.js --mib 256,1024 --paths direct,libp2p,hivemind --repeats 2
 *   node_modules/.bin/node dist/bench/state-download.js --mib 256 --mbit 100,1000 --paths direct,libp2p,hivemind
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { once } from 'node:events'
import { createInterface } from 'node:readline'
import { parseArgs } from 'node:util'
import { loadavg } from 'node:os'
import { multiaddr } from '@multiformats/multiaddr'
import { createSwarmNode, type SwarmNode } from '../agent/net/node.js'
import { kadRoutingTable } from '../agent/net/kad-routing-table.js'
import { StateSharing } from '../agent/state/state-sharing.js'
import { DecentralizedAverager, DEFAULT_AVERAGER_CONFIG, type NamedTensor } from '../agent/averager.js'
import type { DataChannelKind } from '../agent/net/frame-channel.js'
import { formatBytes } from '../agent/util/transfer-progress.js'
import { createShapedLinks, shapedLinksUnsupported } from './lib/shaped-links.js'

const PREFIX = 'bench'
/** Elements per tensor: 64 MiB of float32, a large layer's size. */
const TENSOR_ELEMENTS = 16 * 1024 * 1024
const REQUEST_TIMEOUT_MS = 10_000
// hivemind's peers, from the repository root (this file runs from dist/bench/).
const PYTHON = fileURLToPath(new URL('../../bench/.venv/bin/python', import.meta.url))
const HIVEMIND_STATE = fileURLToPath(new URL('../../bench/peers/hivemind_state.py', import.meta.url))
/** load_state_from_peers waits without limit by default, so a stuck hivemind run is ended here. */
const HIVEMIND_TIMEOUT_MS = 10 * 60_000

type Path = DataChannelKind | 'hivemind'

/** Tensors of `mib` MiB in all, value i of tensor t a function of both, so every value received can be checked. */
function layout (mib: number): Array<{ name: string, shape: number[] }> {
  const total = mib * 1024 * 1024 / 4
  const out: Array<{ name: string, shape: number[] }> = []
  for (let at = 0, t = 0; at < total; at += TENSOR_ELEMENTS, t++) out.push({ name: `layer.${t}`, shape: [Math.min(TENSOR_ELEMENTS, total - at)] })
  return out
}
const valueAt = (t: number, i: number): number => ((i % 1021) - 510) / 256 + t

function tensorsOf (mib: number): NamedTensor[] {
  return layout(mib).map((l, t) => {
    const data = new Float32Array(l.shape[0])
    for (let i = 0; i < data.length; i++) data[i] = valueAt(t, i)
    return { name: l.name, shape: l.shape, data }
  })
}

async function startNode (host: string): Promise<SwarmNode> {
  return await createSwarmNode({ listen: [`/ip4/${host}/tcp/0`], rendezvous: { requestTimeoutMs: REQUEST_TIMEOUT_MS } })
}

/** The donor: serves its state until its parent writes a line, then reports its CPU time. */
async function donor (mib: number, host: string): Promise<void> {
  const tensors = tensorsOf(mib)
  const node = await startNode(host)
  // A live agent's averager: its direct data channel server is where the state is served directly.
  const averager = await DecentralizedAverager.create(node, tensors, { ...DEFAULT_AVERAGER_CONFIG, prefix: PREFIX, requestTimeout: REQUEST_TIMEOUT_MS / 1000 }, {})
  const sharing = new StateSharing(node, { prefix: PREFIX, requestTimeoutMs: REQUEST_TIMEOUT_MS })
  const cpuBefore = process.cpuUsage()
  await sharing.start(async () => ({ tensors, metadata: { step: 1 } }), averager.directEndpoint())
  process.send?.({ addr: node.getMultiaddrs()[0].toString() })
  const lines = createInterface({ input: process.stdin })
  for await (const _ of lines) break
  const cpu = process.cpuUsage(cpuBefore)
  process.send?.({ cpuSeconds: (cpu.user + cpu.system) / 1e6 })
  await sharing.stop()
  await averager.shutdown()
  await node.stop()
  process.exit(0)
}

/** The newcomer: downloads from the donor whose address its parent sends, checks every value, reports time and CPU. */
async function newcomer (mib: number, host: string, path: DataChannelKind, addr: string, into: boolean): Promise<void> {
  const node = await startNode(host)
  await node.dial(multiaddr(addr))
  const deadline = Date.now() + 60_000
  while (kadRoutingTable(node.services.dht).size < 1) {
    if (Date.now() > deadline) throw new Error('the donor never entered the routing table')
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  const sharing = new StateSharing(node, { prefix: PREFIX, requestTimeoutMs: REQUEST_TIMEOUT_MS, directChannel: path === 'direct' })
  const expected = layout(mib)
  // --into: written into zero tensors allocated before, as the sidecar downloads into its averager's.
  const target = into ? expected.map(t => ({ ...t, data: new Float32Array(t.shape[0]) })) : undefined
  let state = null
  let seconds = 0
  let cpuSeconds = 0
  for (let attempt = 0; state === null; attempt++) {
    // The donor's announcement may still be on its way to the key's replica.
    if (attempt === 20) throw new Error('no donor found in 20 attempts')
    if (attempt > 0) await new Promise(resolve => setTimeout(resolve, 250))
    const cpuBefore = process.cpuUsage()
    const started = performance.now()
    state = await sharing.download(expected, undefined, target)
    seconds = (performance.now() - started) / 1000
    const cpu = process.cpuUsage(cpuBefore)
    cpuSeconds = (cpu.user + cpu.system) / 1e6
  }
  if (state.path !== path) throw new Error(`the state came over ${state.path}, not ${path}`)
  for (const [t, tensor] of state.tensors.entries()) {
    for (let i = 0; i < tensor.data.length; i++) {
      if (tensor.data[i] !== Math.fround(valueAt(t, i))) throw new Error(`value ${i} of ${tensor.name} is ${tensor.data[i]}, sent ${Math.fround(valueAt(t, i))}`)
    }
  }
  process.send?.({ seconds, cpuSeconds })
  await node.stop()
  process.exit(0)
}

interface Row { mib: number, path: Path, seconds: number, newcomerCpu: number, donorCpu: number }

/** Where a side runs: its network namespace (on shaped links) and the address it listens on. */
interface Place { readonly ns?: string, readonly host: string }

/** A command, inside the place's namespace when it has one. */
function inPlace (place: Place, command: string, args: string[]): [string, string[]] {
  return place.ns === undefined ? [command, args] : ['ip', ['netns', 'exec', place.ns, command, ...args]]
}

/** Waits for a child to exit by itself (so a donor can shut down cleanly), killing it after 10 s. */
async function exited (child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const timer = setTimeout(() => { child.kill() }, 10_000)
  await once(child, 'exit')
  clearTimeout(timer)
}

/** This file as a child in a role, its messages read one at a time (the IPC channel survives `ip netns exec`). */
function self (place: Place, args: string[]): { child: ChildProcess, next: () => Promise<any> } {
  const [command, argv] = inPlace(place, process.execPath, [fileURLToPath(import.meta.url), ...args, '--host', place.host])
  const child = spawn(command, argv, { stdio: ['pipe', 'inherit', 'inherit', 'ipc'] })
  const messages: any[] = []
  child.on('message', (m) => { messages.push(m) })
  const next = async (): Promise<any> => {
    while (messages.length === 0) {
      const [event] = await Promise.race([once(child, 'message').then(() => ['message']), once(child, 'exit').then(() => ['exit'])])
      if (event === 'exit' && messages.length === 0) throw new Error(`the ${args[0].slice(2)} process ended without answering (its error is above)`)
    }
    return messages.shift()
  }
  return { child, next }
}

async function measure (mib: number, path: DataChannelKind, places: readonly [Place, Place]): Promise<Row> {
  const donorProcess = self(places[0], ['--donor', String(mib)])
  let newcomerProcess: ReturnType<typeof self> | undefined
  try {
    const { addr } = await donorProcess.next()
    newcomerProcess = self(places[1], ['--newcomer', String(mib), '--path', path, '--addr', addr as string, ...(values.into === true ? ['--into'] : [])])
    const { seconds, cpuSeconds } = await newcomerProcess.next()
    donorProcess.child.stdin?.write('stop\n')
    const { cpuSeconds: donorCpu } = await donorProcess.next()
    return { mib, path, seconds, newcomerCpu: cpuSeconds, donorCpu }
  } finally {
    // The donor exits by itself once told to stop (so a --cpu-prof run writes its profile).
    if (donorProcess.child.stdin?.writableEnded === false) donorProcess.child.stdin.end()
    await exited(donorProcess.child)
    if (newcomerProcess !== undefined) await exited(newcomerProcess.child)
  }
}

/** A hivemind_state.py process, read one JSON line at a time; its stderr (warnings, its one-line error) is ours. */
function hivemindPeer (place: Place, args: string[]): { child: ChildProcess, next: () => Promise<any> } {
  const [command, argv] = inPlace(place, PYTHON, [HIVEMIND_STATE, ...args, '--host', place.host])
  const child = spawn(command, argv, { stdio: ['pipe', 'pipe', 'inherit'] })
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]()
  const next = async (): Promise<any> => {
    const { value, done } = await lines.next()
    if (done === true) throw new Error(`hivemind_state.py ${args[1]} ended without answering (its error is above)`)
    return JSON.parse(value)
  }
  return { child, next }
}

/** The same measurement with hivemind: its donor and newcomer each measure their own side. */
async function measureHivemind (mib: number, places: readonly [Place, Place]): Promise<Row> {
  const donor = hivemindPeer(places[0], ['--role', 'donor', '--mib', String(mib)])
  let newcomer: ReturnType<typeof hivemindPeer> | undefined
  const timer = setTimeout(() => { donor.child.kill(); newcomer?.child.kill() }, HIVEMIND_TIMEOUT_MS)
  try {
    const { addrs } = await donor.next()
    newcomer = hivemindPeer(places[1], ['--role', 'newcomer', '--mib', String(mib), '--peers', JSON.stringify(addrs)])
    const { seconds, cpuSeconds } = await newcomer.next()
    donor.child.stdin?.end('stop\n')
    const { cpuSeconds: donorCpu } = await donor.next()
    return { mib, path: 'hivemind', seconds, newcomerCpu: cpuSeconds, donorCpu }
  } finally {
    clearTimeout(timer)
    // EOF on stdin stops the donor too when the newcomer failed; both shut their averager, DHT and p2pd down.
    if (donor.child.stdin?.writableEnded === false) donor.child.stdin.end()
    await exited(donor.child)
    if (newcomer !== undefined) await exited(newcomer.child)
  }
}

const OPTIONS = {
  mib: { type: 'string', default: '256,1024' },
  paths: { type: 'string', default: 'direct,libp2p' },
  repeats: { type: 'string', default: '1' },
  mbit: { type: 'string' },
  // The roles this file plays as a child.
  donor: { type: 'string' },
  newcomer: { type: 'string' },
  host: { type: 'string', default: '127.0.0.1' },
  path: { type: 'string' },
  addr: { type: 'string' },
  into: { type: 'boolean', default: false },
  help: { type: 'boolean', default: false }
} as const

const USAGE = `npm run bench:state-download -- [options]
  --mib LIST     state sizes in MiB, comma-separated (default 256,1024)
  --paths LIST   direct, libp2p and/or hivemind, comma-separated (default direct,libp2p; hivemind: npm run bench:setup first)
  --repeats N    runs of each row (default 1)
  --mbit LIST    link rates in Mbit/s, comma-separated: each side in a network namespace, tbf both ways (root); default loopback
  --into         the newcomer downloads into tensors it allocated before (the sidecar's way)
  --help         this text`

const { values } = (() => {
  try {
    return parseArgs({ options: OPTIONS })
  } catch (err) {
    // An unknown or malformed option: one sentence and the usage, no stack.
    console.error(`bench:state-download: ${err instanceof Error ? err.message : String(err)}\n${USAGE}`)
    process.exit(2)
  }
})()
if (values.help) {
  console.log(USAGE)
  process.exit(0)
}
if (values.donor !== undefined) {
  await donor(Number(values.donor), values.host)
} else if (values.newcomer !== undefined) {
  await newcomer(Number(values.newcomer), values.host, values.path as DataChannelKind, values.addr ?? '', values.into).catch((err: unknown) => {
    console.error(`newcomer: ${err instanceof Error ? err.message : String(err)}`)
    process.exit(1)
  })
} else {
  const sizes = values.mib.split(',').map(Number)
  const repeats = Number(values.repeats)
  const paths = values.paths.split(',')
  const rates = values.mbit === undefined ? [undefined] : values.mbit.split(',').map(Number)
  if (!sizes.every(m => Number.isInteger(m) && m >= 1) || !Number.isInteger(repeats) || repeats < 1 || !paths.every(p => ['direct', 'libp2p', 'hivemind'].includes(p)) ||
    !rates.every(r => r === undefined || (Number.isFinite(r) && r > 0))) {
    console.error('--mib takes whole MiB counts separated by commas, --paths direct, libp2p and/or hivemind, --repeats a whole number >= 1, --mbit link rates in Mbit/s separated by commas')
    process.exit(2)
  }
  if (values.mbit !== undefined) {
    const why = await shapedLinksUnsupported()
    if (why !== undefined) { console.error(`--mbit: ${why}`); process.exit(2) }
  }
  console.log(`state download, one donor process, one newcomer process; load average ${loadavg()[0].toFixed(1)}`)
  console.log('| link | state | path | seconds | MB/s | newcomer CPU s per GB | donor CPU s per GB |')
  console.log('|---|---:|---|---:|---:|---:|---:|')
  for (const rate of rates) {
    // Each side in a namespace of its own, its link shaped to the rate both ways (tc tbf; no added delay: no netem here).
    const links = rate === undefined ? undefined : await createShapedLinks('avsstate', 240 + (process.pid % 10), [rate, rate])
    const places: [Place, Place] = links === undefined
      ? [{ host: '127.0.0.1' }, { host: '127.0.0.1' }]
      : [{ ns: links.namespaces[0], host: links.addrs[0] }, { ns: links.namespaces[1], host: links.addrs[1] }]
    const link = rate === undefined ? 'loopback' : `${rate} Mbit/s`
    try {
      for (const mib of sizes) {
        // Alternating paths within a repeat, so both see the same load.
        for (let r = 0; r < repeats; r++) {
          for (const path of paths as Path[]) {
            if (path === 'hivemind' && !existsSync(PYTHON)) {
              console.log(`| ${link} | ${formatBytes(mib * 1024 * 1024)} | hivemind | missing (npm run bench:setup) | | | |`)
              continue
            }
            const row = path === 'hivemind' ? await measureHivemind(mib, places) : await measure(mib, path, places)
            const gb = mib * 1024 * 1024 / 1e9
            console.log(`| ${link} | ${formatBytes(mib * 1024 * 1024)} | ${path} | ${row.seconds.toFixed(2)} | ${(gb / row.seconds * 1000).toFixed(1)} | ${(row.newcomerCpu / gb).toFixed(2)} | ${(row.donorCpu / gb).toFixed(2)} |`)
          }
        }
      }
    } finally {
      await links?.destroy()
    }
  }
  console.log(`load average after: ${loadavg()[0].toFixed(1)}`)
  process.exit(0)
}
