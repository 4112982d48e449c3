import { existsSync } from 'node:fs'
import { join } from 'node:path'

/** How the runner starts one implementation's peer process (paths relative to the repository root). */
export interface ImplSpec {
  readonly name: string
  readonly description: string
  readonly command: readonly string[]
  readonly env?: Readonly<Record<string, string>>
  /** whether it can average in groups smaller than the world (--group-size) */
  readonly groups: boolean
  /** files that must exist, and what to run when they do not */
  readonly requires: ReadonlyArray<{ path: string, hint: string }>
}

const NODE = 'node_modules/.bin/node'
const PYTHON = 'bench/.venv/bin/python'
const needsBuild = (file: string): { path: string, hint: string } => ({ path: file, hint: 'npm run build' })
const needsVenv = { path: PYTHON, hint: 'npm run bench:setup' }
/** The trainer rows use the project's own venv, where the README's trainer path installs the client package. */
const TRAINER_PYTHON = '.venv/bin/python'
const needsClient = { path: TRAINER_PYTHON, hint: '/usr/bin/python3 -m venv --system-site-packages .venv && .venv/bin/pip install ./clients/python' }

export const IMPLS: readonly ImplSpec[] = [
  { name: 'ours', groups: true, description: "this project's averager (bench/peers/ours.ts)", command: [NODE, 'dist/bench/peers/ours.js'], requires: [needsBuild('dist/bench/peers/ours.js')] },
  { name: 'ours-libp2p', groups: true, description: "this project's averager with parts on libp2p streams (no direct channel)", command: [NODE, 'dist/bench/peers/ours.js'], env: { BENCH_DATA_CHANNEL: 'libp2p' }, requires: [needsBuild('dist/bench/peers/ours.js')] },
  { name: 'ours-js', groups: true, description: "this project's averager with the JavaScript kernels instead of WebAssembly SIMD", command: [NODE, 'dist/bench/peers/ours.js'], env: { BENCH_KERNELS: 'js' }, requires: [needsBuild('dist/bench/peers/ours.js')] },
  ...[1, 2].map(threads => ({ name: `ours-threads-${threads}`, groups: true, description: `this project's averager with the direct channel's sockets on ${threads} data thread(s) besides the main thread`, command: [NODE, 'dist/bench/peers/ours.js'], env: { BENCH_DATA_THREADS: String(threads) }, requires: [needsBuild('dist/bench/peers/ours.js')] })),
  { name: 'hivemind', groups: true, description: "hivemind 1.1.12 DecentralizedAverager over p2pd", command: [PYTHON, 'bench/peers/hivemind_peer.py'], requires: [needsVenv] },
  ...(['shm', 'torch', 'cuda', 'binary', 'base64'] as const).map(path => ({ name: `trainer-${path}`, groups: true, description: `a Python trainer and its agent through the sidecar API, ${path} path (bench/peers/trainer_peer.py)`, command: [TRAINER_PYTHON, 'bench/peers/trainer_peer.py'], env: { BENCH_TRAINER_PATH: path }, requires: [needsClient, needsBuild('dist/agent/main.js')] })),
  { name: 'gloo', groups: false, description: 'torch.distributed all_reduce, gloo backend (unencrypted)', command: [PYTHON, 'bench/peers/gloo_peer.py'], requires: [needsVenv] },
  { name: 'tcp', groups: false, description: 'ceiling: all-reduce traffic over raw TCP sockets', command: [NODE, 'dist/bench/peers/tcp_ceiling.js'], requires: [needsBuild('dist/bench/peers/tcp_ceiling.js')] },
  { name: 'tls', groups: false, description: 'floor: all-reduce traffic over Node native TLS sockets', command: [NODE, 'dist/bench/peers/tls_floor.js'], requires: [needsBuild('dist/bench/peers/tls_floor.js')] },
  { name: 'libp2p-tls', groups: false, description: 'floor: all-reduce traffic over libp2p TCP + TLS + yamux', command: [NODE, 'dist/bench/peers/libp2p_floor.js'], env: { BENCH_LIBP2P_ENCRYPTER: 'tls' }, requires: [needsBuild('dist/bench/peers/libp2p_floor.js')] },
  { name: 'libp2p-noise', groups: false, description: 'floor: all-reduce traffic over libp2p TCP + Noise + yamux', command: [NODE, 'dist/bench/peers/libp2p_floor.js'], env: { BENCH_LIBP2P_ENCRYPTER: 'noise' }, requires: [needsBuild('dist/bench/peers/libp2p_floor.js')] }
]

export function implNamed (name: string): ImplSpec {
  const spec = IMPLS.find((i) => i.name === name)
  if (spec == null) throw new Error(`unknown implementation "${name}"; known: ${IMPLS.map((i) => i.name).join(', ')}`)
  return spec
}

/** Why an implementation cannot run here, or null when it can. */
export function missingPart (spec: ImplSpec, root: string): string | null {
  for (const need of spec.requires) {
    if (!existsSync(join(root, need.path))) return `${need.path} not found (run: ${need.hint})`
  }
  return null
}
