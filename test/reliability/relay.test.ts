import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, type ChildProcess } from 'node:child_process'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { generateKeyPair, privateKeyToProtobuf } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { newSwarmKeyText } from '../../agent/net/pnet/index.js'
import { createNatSites, natSitesUnsupported, type NatSites } from '../../tools/faults/nat-sites.js'
import { fill, maxAbsDiff, weightedMean } from '../agent/swarm-fixture.js'
import type { SiteAgent, SiteConfig } from './relay-site.js'

const SITE = fileURLToPath(new URL('./relay-site.js', import.meta.url))
const unsupported = await natSitesUnsupported()
if (unsupported !== undefined) console.log(`relay test skipped: ${unsupported}`)

type Line = Record<string, any> & { type: string, index: number }

/** A site process: its agents' output lines, and commands that wait for their answers. */
class Site {
  readonly lines: Line[] = []
  private readonly child: ChildProcess
  private readonly waiters: Array<() => void> = []
  stderr = ''

  constructor (readonly name: string, ns: string, config: SiteConfig) {
    this.child = spawn('ip', ['netns', 'exec', ns, process.execPath, SITE, JSON.stringify(config)], { stdio: ['pipe', 'pipe', 'pipe'] })
    // The tail of the site's stderr kept for AVS_TEST_LOG: 400 kB, or AVS_TEST_LOG_BYTES (tens of MB for DEBUG=*libp2p:* runs).
    this.child.stderr!.on('data', (d: Buffer) => { this.stderr = (this.stderr + d.toString()).slice(-(Number(process.env.AVS_TEST_LOG_BYTES ?? 400000))) })
    createInterface({ input: this.child.stdout! }).on('line', (text) => {
      try { this.lines.push(JSON.parse(text) as Line) } catch { this.stderr += `\n(stdout) ${text}` }
      for (const w of this.waiters.splice(0)) w()
    })
    this.child.once('exit', () => { for (const w of this.waiters.splice(0)) w() })
  }

  async until<T> (what: string, get: () => T | undefined, ms: number): Promise<T> {
    const deadline = Date.now() + ms
    for (;;) {
      const v = get()
      if (v !== undefined) return v
      if (Date.now() > deadline || this.child.exitCode !== null) throw new Error(`${this.name}: no ${what} within ${ms} ms (exit ${this.child.exitCode}); stderr: ${this.stderr.slice(-4000)}`)
      await new Promise<void>(resolve => { this.waiters.push(resolve); setTimeout(resolve, 200) })
    }
  }

  of (type: string, after = 0): Line[] { return this.lines.slice(after).filter(l => l.type === type) }

  /** Sends a command; resolves with the lines it produced once the site says it is done. */
  async command (cmd: string, ms: number): Promise<Line[]> {
    const from = this.lines.length
    this.child.stdin!.write(cmd + '\n')
    const verb = cmd.split(' ')[0]
    await this.until(`answer to ${verb}`, () => this.lines.slice(from).find(l => l.type === 'done' && l.cmd === verb), ms)
    return this.lines.slice(from)
  }

  kill (): void { if (this.child.exitCode === null) this.child.kill('SIGKILL') }
}

async function member (ip: string, seed: number, relaySlots?: number): Promise<SiteAgent & { id: string }> {
  const key = await generateKeyPair('Ed25519')
  return { key: Buffer.from(privateKeyToProtobuf(key)).toString('base64'), ip, seed, relaySlots, id: peerIdFromPrivateKey(key).toString() }
}

// Across NATs: members behind NAT reach each other through a member relay; one refused a slot
// averages as a client; outsiders get nothing relayed. Real namespaces, routers and iptables NAT.
test('NAT sites: relayed members average to the exact mean, a member without a relay slot as a client, outsiders get 0 bytes relayed', { skip: unsupported, timeout: 120_000 }, async (t) => {
  const subnet = 1 + (process.pid % 200)
  const net: NatSites = await createNatSites(`avr${subnet}`, subnet, [3, 3])
  const sites: Site[] = []
  const started = Date.now()
  const elapsed = (): string => `${((Date.now() - started) / 1000).toFixed(1)} s`
  try {
    const elements = 65536
    // The relay (also the bootstrap agent) has 4 slots: A1, A2, B1, B2 take them; B3 comes last and is refused.
    const relay = await member(net.publicIp, 1, 4)
    const a = [await member(net.sites[0].ips[0], 2), await member(net.sites[0].ips[1], 3)]
    const b = [await member(net.sites[1].ips[0], 4), await member(net.sites[1].ips[1], 5)]
    const late = await member(net.sites[1].ips[2], 6)
    const members = [relay, ...a, ...b, late]
    const psk = newSwarmKeyText()
    const common = { psk, allow: members.map(m => m.id), elements, groupSize: members.length }
    const bootstrap = `/ip4/${net.publicIp}/tcp/4001/p2p/${relay.id}`
    const publicSite = new Site('public', net.publicNs, { ...common, agents: [relay] })
    sites.push(publicSite)
    await publicSite.until('relay ready', () => publicSite.of('ready')[0], 20_000)
    const siteA = new Site('site A', net.sites[0].ns, { ...common, bootstrap, agents: a })
    const siteB = new Site('site B', net.sites[1].ns, { ...common, bootstrap, agents: b })
    sites.push(siteA, siteB)
    const readyA = await siteA.until('site A ready', () => { const r = siteA.of('ready'); return r.length === 2 ? r : undefined }, 40_000)
    const readyB = await siteB.until('site B ready', () => { const r = siteB.of('ready'); return r.length === 2 ? r : undefined }, 40_000)
    for (const r of [...readyA, ...readyB]) assert.equal(r.reach?.kind, 'relayed', `a NATed member reserved a relay slot: ${JSON.stringify(r.reach)}`)
    const siteB3 = new Site('site B (late)', net.sites[1].ns, { ...common, bootstrap, agents: [late] })
    sites.push(siteB3)
    const [readyLate] = await siteB3.until('late agent ready', () => siteB3.of('ready')[0] !== undefined ? siteB3.of('ready') : undefined, 40_000)
    assert.equal(readyLate.reach?.kind, 'unreachable', `the relay's slots were full: ${JSON.stringify(readyLate.reach)}`)
    t.diagnostic(`${elapsed()} ready: A and B relayed through ${relay.id.slice(-6)}, the late B agent unreachable (${readyLate.reach.why})`)

    // One round, all six in one group (each reduces a span, the client none): everyone ends at
    // the exact mean. (A second round would scatter them by Moshpit's group bits.)
    const expected = weightedMean(members.map(m => fill(elements, m.seed)), members.map(() => 1))
    for (const round of [1]) {
      const steps = (await Promise.all(sites.map(async s => await s.command('step', 90_000)))).map(ls => ls.filter(l => l.type === 'step'))
      const all = steps.flat()
      assert.equal(all.length, members.length)
      const errors = all.map(s => s.values === undefined ? NaN : maxAbsDiff(new Float32Array(new Uint8Array(Buffer.from(s.values, 'base64')).buffer), expected))
      const summary = all.map((s, i) => `${s.peerId?.slice(-6) ?? s.index}: err ${errors[i]} ${JSON.stringify({ ...s, values: undefined, peers: undefined, type: undefined })}`).join('\n')
      for (const [i, s] of all.entries()) {
        assert.equal(s.error, undefined, `round ${round}:\n${summary}`)
        assert.equal(s.peers.length, members.length, `round ${round}: one group of all members`)
        assert.deepEqual(s.failedReducers, [], `round ${round}:\n${summary}`)
        assert.deepEqual(s.bannedSenders, [], `round ${round}:\n${summary}`)
        assert.ok(errors[i] < 1e-4, `round ${round}: every agent holds the exact mean:\n${summary}`)
      }
      t.diagnostic(`${elapsed()} round ${round}: ${all.length} agents at the exact mean, step ${Math.min(...all.map(s => s.ms))}-${Math.max(...all.map(s => s.ms))} ms; parts by path ${JSON.stringify(all.map(s => s.dataChannel))}`)
    }

    // Outsiders: one without the key, one with it but off the allow list. Each dials the relay,
    // then a member through the relay's circuit.
    const outsiders = [{ ...(await member(net.sites[0].ips[2], 7)), psk: newSwarmKeyText() }, { ...(await member(net.sites[0].ips[2], 8)), psk }]
    const circuit = `${bootstrap}/p2p-circuit/p2p/${a[0].id}`
    for (const o of outsiders) {
      const site = new Site('outsider', net.sites[0].ns, { ...common, psk: o.psk, agents: [{ ...o, ip: net.sites[0].ips[2] }], outsider: true })
      sites.push(site)
      await site.until('outsider ready', () => site.of('ready')[0], 20_000)
      // Without the key the handshake to the relay fails outright. With it, the outsider's own
      // side may finish its handshake before the relay's allow list closes the connection, so
      // what counts is that no circuit through the relay opens and nothing is relayed.
      const [toRelay] = (await site.command(`dial ${bootstrap}`, 20_000)).filter(l => l.type === 'dial')
      if (o.psk !== psk) assert.equal(toRelay.ok, false, 'an outsider without the key connected to the relay')
      const [throughRelay] = (await site.command(`dial ${circuit}`, 20_000)).filter(l => l.type === 'dial')
      assert.equal(throughRelay.ok, false, `an outsider reached a member through the relay: ${JSON.stringify(throughRelay)}`)
      site.kill()
    }
    const stats = (await Promise.all(sites.slice(0, 4).map(async s => await s.command('stats', 10_000)))).flat().filter(l => l.type === 'stats')
    const relayStats = stats[0]
    for (const o of outsiders) {
      assert.equal(relayStats.relayed[o.id] ?? 0, 0, 'an outsider got 0 bytes relayed')
      assert.equal(relayStats.byPeer[o.id], undefined, 'the relay holds no connection from an outsider')
    }
    const relayedBytes = Object.values(relayStats.relayed as Record<string, number>).reduce((x, y) => x + y, 0)
    assert.ok(relayedBytes > 2 * elements * 4, `the relay carried the cross-site parts (${relayedBytes} bytes)`)
    const opened = { direct: 0, 'hole-punched': 0, relayed: 0 }
    for (const s of stats.slice(1)) for (const k of Object.keys(opened) as Array<keyof typeof opened>) opened[k] += s.opened[k]
    const open = { direct: 0, 'hole-punched': 0, relayed: 0 }
    for (const s of stats.slice(1)) for (const k of Object.keys(open) as Array<keyof typeof open>) open[k] += s.open[k]
    const protectedRelayed = stats.slice(1).reduce((n, s) => n + (s.protectedRelayed as number), 0)
    assert.ok(opened.relayed > 0, 'members across the sites connected through the relay')
    assert.ok(protectedRelayed >= opened.relayed, `every relayed connection passed the private-network key inside the circuit too (${protectedRelayed} protected, ${opened.relayed} relayed)`)
    t.diagnostic(`${elapsed()} connections of the NATed agents: opened ${JSON.stringify(opened)}, open at the end ${JSON.stringify(open)}; relayed bytes on the relay: ${relayedBytes} (${JSON.stringify(relayStats.relayed)}); outsiders 0`)
  } finally {
    if (process.env.AVS_TEST_LOG !== undefined) {
      // Each site's stderr (averager logs, DEBUG=libp2p:* output) and its JSON lines, for digging.
      const dir = mkdtempSync(join(tmpdir(), 'avs-relay-'))
      for (const [i, s] of sites.entries()) writeFileSync(join(dir, `${i}-${s.name.replace(/\W+/g, '-')}.log`), `${s.stderr}\n${s.lines.map(l => JSON.stringify({ ...l, values: undefined })).join('\n')}\n`)
      t.diagnostic(`site logs in ${dir}`)
    }
    for (const s of sites) s.kill()
    await net.destroy()
  }
})
