import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { AnnounceFile } from '../../../agent/net/announce-file.js'
import { createSwarmNode } from '../../../agent/net/node.js'
import { loadAgentConfig } from '../../../agent/config.js'
import { linesLog } from '../../../agent/log.js'

test('AnnounceFile: missing means nothing extra; a written file is picked up on reread; bad entries are skipped', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'avs-announce-'))
  const logs: string[] = []
  try {
    const f = new AnnounceFile(join(dir, 'demo-agent-0'), linesLog((m) => logs.push(m)))
    assert.equal(await f.reread(), false, 'a missing file is no change from nothing')
    assert.deepEqual(f.addrs, [])
    writeFileSync(join(dir, 'demo-agent-0'), '/ip4/203.0.113.7/tcp/30001,/dns4/abc.elb.amazonaws.com/tcp/31337, not-a-multiaddr\n')
    assert.equal(await f.reread(), true)
    assert.deepEqual(f.addrs.map(String), ['/ip4/203.0.113.7/tcp/30001', '/dns4/abc.elb.amazonaws.com/tcp/31337'])
    assert.ok(logs.some(l => l.includes('ignoring "not-a-multiaddr"')))
    assert.equal(await f.reread(), false, 'unchanged')
  } finally { rmSync(dir, { recursive: true, force: true }) }
})

test('AnnounceFile: data= entries are where our data channel is reached (host and TCP port only), apart from the libp2p addresses', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'avs-announce-'))
  const logs: string[] = []
  try {
    const f = new AnnounceFile(join(dir, 'demo-agent-0'), linesLog((m) => logs.push(m)))
    writeFileSync(join(dir, 'demo-agent-0'), '/ip4/203.0.113.7/tcp/30001,data=/ip4/203.0.113.7/tcp/30101,data=/dns4/gw.example.com/tcp/30101,data=/ip4/203.0.113.7/udp/30101,data=/ip4/203.0.113.7/tcp/30101/p2p/12D3KooWJWoaqZhDaoEFshF7Rh1bpY9ohihFhzcW6d69Lr2NASuq,data=nonsense\n')
    assert.equal(await f.reread(), true)
    assert.deepEqual(f.addrs.map(String), ['/ip4/203.0.113.7/tcp/30001'], 'no data entry is announced as a libp2p address')
    assert.deepEqual(f.dataAddrs.map(String), ['/ip4/203.0.113.7/tcp/30101', '/dns4/gw.example.com/tcp/30101'])
    assert.equal(logs.filter(l => l.includes('ignoring "data=')).length, 3, logs.join('\n'))
    assert.ok(logs.some(l => l.includes('our data channel at /ip4/203.0.113.7/tcp/30101, /dns4/gw.example.com/tcp/30101')), logs.join('\n'))
    writeFileSync(join(dir, 'demo-agent-0'), '/ip4/203.0.113.7/tcp/30001\n')
    assert.equal(await f.reread(), true)
    assert.deepEqual(f.dataAddrs, [], 'a data entry taken out of the file is gone')
  } finally { rmSync(dir, { recursive: true, force: true }) }
})

test('a node announces the file\'s addresses first (with its peer id), its own listen address after, and follows changes', async () => {
  let extra = [] as Array<import('@multiformats/multiaddr').Multiaddr>
  const { multiaddr } = await import('@multiformats/multiaddr')
  const node = await createSwarmNode({ listen: ['/ip4/127.0.0.1/tcp/0'], announceExtra: () => extra })
  try {
    const id = node.peerId.toString()
    assert.deepEqual(node.getMultiaddrs().map(String).filter(a => !a.startsWith('/ip4/127.0.0.1/')), [])
    extra = [multiaddr('/ip4/203.0.113.7/tcp/31337')]
    const addrs = node.getMultiaddrs().map(String)
    assert.equal(addrs[0], `/ip4/203.0.113.7/tcp/31337/p2p/${id}`)
    assert.ok(addrs.slice(1).some(a => a.startsWith('/ip4/127.0.0.1/tcp/')), 'the pod address stays, for peers inside the cluster')
  } finally { await node.stop() }
})

test('AVS_ANNOUNCE_FILE is read as a path; unset is undefined', () => {
  const base = { AVS_SWARM: 's', AVS_POD_NAME: 's-agent-0', AVS_PREFIX: 'p' }
  assert.equal(loadAgentConfig({ ...base, AVS_ANNOUNCE_FILE: '/etc/averaging-swarm/announce/s-agent-0' }).announceFile, '/etc/averaging-swarm/announce/s-agent-0')
  assert.equal(loadAgentConfig(base).announceFile, undefined)
})
