#!/usr/bin/env node
// Bundles the compiled agent (dist/agent/main.js, after tsc) into one file, dist/agent-bundle/main.js, which the
// agent image runs: Node then reads one file instead of resolving and loading ~970 modules, and a (re)started agent
// loads in 0.26 s instead of 0.59 s, 0.29 CPU s instead of 0.83 (this 2-core machine, compile cache on, as in a pod;
// docs/roadmap.md, "Real-world conditions"). That is half of a restarted agent's way to its trainer's registration.
// The agent's two workers are found next to the module that starts them (`new URL('./x.js', import.meta.url)`), so
// they are bundled next to main.js under the same names. @tensorflow/* stays outside (native addons, wasm files
// found from its package folder): the builtin workload imports it from node_modules, which the image keeps.
import { build } from 'esbuild'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('..', import.meta.url))
await build({
  absWorkingDir: root,
  entryPoints: {
    main: 'dist/agent/main.js',
    'data-thread': 'dist/agent/net/direct/threads/data-thread.js',
    'sha256-worker': 'dist/agent/checkpoint/sha256-worker.js'
  },
  outdir: 'dist/agent-bundle',
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node22',
  external: ['@tensorflow/*'],
  // CommonJS dependencies call require(); an ES module has none of its own.
  banner: { js: "import { createRequire as __avsCreateRequire } from 'node:module'; const require = __avsCreateRequire(import.meta.url);" },
  sourcemap: true,
  logLevel: 'warning'
})
