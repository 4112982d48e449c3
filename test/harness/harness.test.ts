/** Unit tests of the harness's pure parts (no cluster needed). */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, existsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { V1PersistentVolume, V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node'
import { parseClusterName, inClusterZone } from './dns/names.js'
import { rewritePaths, mountTable, materialiseVolumes, VolumeMountError } from './kubelet/volumes.js'
import type { PodSources } from './kubelet/pod-sources.js'
import { expandVars } from './kubelet/env.js'
import { ownedConditionsDiffering, podPhase, podStatusPatch, type ContainerRecord, type PodRuntime } from './kubelet/pod-status.js'
import { resolveCommand, DEFAULT_IMAGES } from './kubelet/images.js'
import { selectLog } from './kubelet/log-server.js'

describe('cluster DNS names', () => {
  it('parses service and StatefulSet pod names, with or without cluster.local', () => {
    assert.deepEqual(parseClusterName('peers.ml.svc.cluster.local.'), { kind: 'service', service: 'peers', namespace: 'ml' })
    assert.deepEqual(parseClusterName('demo-0.peers.ml.svc'), { kind: 'pod', hostname: 'demo-0', subdomain: 'peers', namespace: 'ml' })
    assert.equal(parseClusterName('example.com'), undefined)
    assert.equal(parseClusterName('a.b.c.d.svc.cluster.local'), undefined)
    assert.equal(inClusterZone('x.y.svc.cluster.local'), true)
    assert.equal(inClusterZone('localhost'), false)
  })
})

describe('volume mount path rewriting', () => {
  const table = mountTable(
    { name: 'c', volumeMounts: [{ name: 'psk', mountPath: '/etc/avs/psk' }, { name: 'etc', mountPath: '/etc/avs' }] },
    { dirs: new Map([['psk', '/tmp/p/psk'], ['etc', '/tmp/p/etc']]), tokenVolumes: new Set() })
  it('rewrites the longest mount prefix, once, wherever a path starts', () => {
    assert.equal(rewritePaths('/etc/avs/psk/swarm.key', table), '/tmp/p/psk/swarm.key')
    assert.equal(rewritePaths('--config=/etc/avs/config.yaml', table), '--config=/tmp/p/etc/config.yaml')
    assert.equal(rewritePaths('/etc/avsx/file', table), '/etc/avsx/file')
    assert.equal(rewritePaths('/data/etc/avs', table), '/data/etc/avs')
  })
})

describe('persistentVolumeClaim volumes', () => {
  const claim = (name: string, over: { phase?: string, volumeName?: string } = {}): V1PersistentVolumeClaim => ({
    metadata: { name, namespace: 'ml', uid: `uid-${name}` },
    spec: over.volumeName === undefined ? {} : { volumeName: over.volumeName },
    status: over.phase === undefined ? {} : { phase: over.phase }
  })
  const pv = (name: string, claimName: string, source: Partial<NonNullable<V1PersistentVolume['spec']>>): V1PersistentVolume => ({
    metadata: { name }, spec: { claimRef: { namespace: 'ml', name: claimName, uid: `uid-${claimName}` }, ...source }
  })
  const sources = (claims: V1PersistentVolumeClaim[], pvs: V1PersistentVolume[]): PodSources => ({
    secret: async () => undefined,
    configMap: async () => undefined,
    serviceAccountToken: async () => 'token',
    persistentVolumeClaim: async (_ns, name) => claims.find(c => c.metadata?.name === name),
    persistentVolume: async (name) => pvs.find(p => p.metadata?.name === name)
  })
  const pod = (name: string, claimName: string): V1Pod => ({
    metadata: { name, namespace: 'ml', uid: `uid-${name}` },
    spec: {
      containers: [{ name: 'agent', volumeMounts: [{ name: 'ckpt', mountPath: '/var/lib/avs/checkpoints' }] }],
      volumes: [{ name: 'ckpt', persistentVolumeClaim: { claimName } }]
    }
  })
  const addresses = { podIP: '127.2.1.1', hostIP: '127.2.0.1' }
  const api = { server: 'https://127.0.0.1:1', caCertFile: '/dev/null' }

  it('mounts the bound PersistentVolume\'s hostPath, one folder shared by every pod of the claim, rewritten in env values', async () => {
    const root = mkdtempSync(join(tmpdir(), 'avs-pvc-'))
    try {
      const shared = join(root, 'pv', 'ckpt')
      const src = sources([claim('ckpt', { phase: 'Bound', volumeName: 'pv-1' })], [pv('pv-1', 'ckpt', { hostPath: { path: shared } })])
      const a = await materialiseVolumes(pod('a', 'ckpt'), join(root, 'a'), addresses, src, api)
      const b = await materialiseVolumes(pod('b', 'ckpt'), join(root, 'b'), addresses, src, api)
      assert.equal(a.dirs.get('ckpt'), shared)
      assert.equal(b.dirs.get('ckpt'), shared)
      assert.ok(existsSync(shared), 'a hostPath of type "" is created, as the container runtime does')
      const table = mountTable(pod('a', 'ckpt').spec!.containers[0], a)
      assert.equal(rewritePaths('/var/lib/avs/checkpoints', table), shared)
      const local = join(root, 'local')
      await assert.rejects(materialiseVolumes(pod('c', 'l'), join(root, 'c'), addresses, sources([claim('l', { phase: 'Bound', volumeName: 'pv-l' })], [pv('pv-l', 'l', { local: { path: local } })]), api),
        (e: Error) => e instanceof VolumeMountError && /local volume path .* does not exist/.test(e.message))
    } finally {
      rmSync(root, { recursive: true, force: true })
    }
  })

  it('refuses, naming why, a missing or unbound claim, a PV bound elsewhere, and a PV it cannot mount', async () => {
    const root = mkdtempSync(join(tmpdir(), 'avs-pvc-'))
    const failure = async (src: PodSources): Promise<string> => {
      try { await materialiseVolumes(pod('p', 'ckpt'), join(root, 'p'), addresses, src, api) } catch (e) { assert.ok(e instanceof VolumeMountError, String(e)); return e.message }
      assert.fail('mounted')
    }
    try {
      assert.match(await failure(sources([], [])), /volume "ckpt": persistentvolumeclaim "ckpt" not found/)
      assert.match(await failure(sources([claim('ckpt', { phase: 'Pending' })], [])), /non-bound phase \("Pending"\) or empty pvc.Spec.VolumeName \(""\)/)
      assert.match(await failure(sources([claim('ckpt', { phase: 'Bound', volumeName: 'gone' })], [])), /persistentvolume "gone" .* not found/)
      assert.match(await failure(sources([claim('ckpt', { phase: 'Bound', volumeName: 'pv-1' })], [pv('pv-1', 'other', { hostPath: { path: root } })])), /not bound to PVC ml\/ckpt \(its claimRef: ml\/other\)/)
      assert.match(await failure(sources([claim('ckpt', { phase: 'Bound', volumeName: 'pv-1' })], [pv('pv-1', 'ckpt', { nfs: { server: 'x', path: '/' } })])), /has neither hostPath nor local/)
    } finally {
      rmSync(root, { recursive: true, force: true })
    }
  })
})

describe('env expansion', () => {
  it('expands $(VAR) from earlier variables and keeps $$ escapes', () => {
    const vars = new Map([['IP', '127.2.1.1']])
    assert.equal(expandVars('/ip4/$(IP)/tcp/1', vars), '/ip4/127.2.1.1/tcp/1')
    assert.equal(expandVars('$$(IP) $(NOPE)', vars), '$(IP) $(NOPE)')
  })
})

describe('pod status', () => {
  const record = (over: Partial<ContainerRecord>): ContainerRecord => ({
    name: 'c', image: 'i', state: { waiting: { reason: 'ContainerCreating' } }, ready: false, started: false, restartCount: 0, finished: false, everStarted: false, ...over
  })
  const runtime = (containers: ContainerRecord[], over: Partial<PodRuntime> = {}): PodRuntime => ({
    podIP: '127.2.1.1', hostIP: '127.2.0.1', startTime: 't0', initContainers: [], containers, initialized: true, initFailed: false, ...over
  })
  it('derives the phase from the containers', () => {
    assert.equal(podPhase(runtime([record({})])), 'Pending')
    assert.equal(podPhase(runtime([record({ everStarted: true })])), 'Running')
    assert.equal(podPhase(runtime([record({ everStarted: true, finished: true, state: { terminated: { exitCode: 0 } } })])), 'Succeeded')
    assert.equal(podPhase(runtime([record({ everStarted: true, finished: true, state: { terminated: { exitCode: 2 } } })])), 'Failed')
    assert.equal(podPhase(runtime([record({ everStarted: true })], { initialized: false })), 'Pending')
  })
  it('keeps conditions it does not own and their transition times', () => {
    const pod = { status: { conditions: [{ type: 'PodScheduled', status: 'True' }, { type: 'Ready', status: 'True', lastTransitionTime: 'old' as unknown as Date }] } }
    const patch = podStatusPatch(pod, runtime([record({ everStarted: true, ready: true })]), 'now') as { status: { conditions: Array<{ type: string, status: string, lastTransitionTime: string }> } }
    const byType = new Map(patch.status.conditions.map((c) => [c.type, c]))
    assert.equal(byType.get('PodScheduled')?.status, 'True')
    assert.equal(byType.get('Ready')?.lastTransitionTime, 'old')
    assert.equal(byType.get('ContainersReady')?.lastTransitionTime, 'now')
  })
  it('notices when another writer flipped a condition it owns (node controller marking pods NotReady), not others', () => {
    const ready = runtime([record({ everStarted: true, ready: true })])
    const conds = (readyStatus: string) => ({ status: { conditions: ['PodReadyToStartContainers', 'Initialized', 'ContainersReady'].map((type) => ({ type, status: 'True' })).concat([{ type: 'Ready', status: readyStatus }, { type: 'PodScheduled', status: 'False' }]) } })
    assert.deepEqual(ownedConditionsDiffering(conds('False'), ready), ['Ready'])
    assert.deepEqual(ownedConditionsDiffering(conds('True'), ready), [])
  })
})

describe('image table', () => {
  it('maps the agent image to the checkout and honours container.command', () => {
    const agent = resolveCommand({ name: 'a', image: 'ghcr.io/x/averaging-swarm/agent:1.0', args: ['--x'] }, DEFAULT_IMAGES, '/tmp')
    assert.ok(typeof agent !== 'string' && agent.args[0].endsWith('dist/agent-bundle/main.js') && agent.args[1] === '--x', 'the one file Dockerfile.agent runs')
    assert.equal(agent.fromImage, 2, 'node and the entry script are the checkout\'s, never rewritten as volume paths')
    const sleep = resolveCommand({ name: 's', image: 'busybox', command: ['sleep', '5'] }, DEFAULT_IMAGES, '/tmp')
    assert.deepEqual(sleep, { file: 'sleep', args: ['5'], cwd: '/tmp', fromImage: 0 })
    assert.equal(typeof resolveCommand({ name: 'u', image: 'nginx' }, DEFAULT_IMAGES, '/tmp'), 'string')
  })
})

describe('container log selection (kubectl logs)', () => {
  const content = [
    '--- 2026-01-01T00:00:00Z start #0: node a.js', 'one', 'two', '--- 2026-01-01T00:00:05Z exited: code 1 signal null',
    '--- 2026-01-01T00:00:06Z start #1: node a.js', 'three', 'four', 'five', ''
  ].join('\n')
  it('returns the latest run without marker lines, or the previous one, or the tail', () => {
    assert.equal(selectLog(content, false, undefined), 'three\nfour\nfive\n')
    assert.equal(selectLog(content, true, undefined), 'one\ntwo')
    assert.equal(selectLog(content, false, 2), 'four\nfive\n')
  })
})
