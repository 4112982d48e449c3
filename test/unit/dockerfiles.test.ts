/**
 * Dockerfile.operator and Dockerfile.agent cannot be built here (no Docker engine), so this checks
 * what can be checked: after `npm run build` the entry point each image starts exists, every
 * module it loads comes from the source folders the Dockerfile copies and from production
 * dependencies (dev dependencies are pruned), the images are multi-stage and non-root, and their
 * names and tags are the chart's and the operator's defaults.
 */
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join, normalize, relative } from 'node:path'
import { builtinModules } from 'node:module'
import { parse } from 'yaml'
import { DEFAULT_BUILDER_CONFIG } from '../../operator/builders/config.js'

interface Dockerfile { image: string, entrypoint: string[], copiedDirs: string[], stages: number, user: string | undefined }

function readDockerfile (path: string): Dockerfile {
  const text = readFileSync(path, 'utf8')
  const lines = text.split('\n')
  const image = /-t (\S+) \./.exec(text)?.[1] ?? ''
  const entry = lines.find(l => l.startsWith('ENTRYPOINT '))
  const copiedDirs = lines.map(l => /^COPY (\w+) \1$/.exec(l)?.[1]).filter((d): d is string => d !== undefined)
  const user = lines.filter(l => l.startsWith('USER ')).at(-1)?.slice(5).trim()
  return { image, entrypoint: entry === undefined ? [] : JSON.parse(entry.slice(11)), copiedDirs, stages: lines.filter(l => l.startsWith('FROM ')).length, user }
}

/** Relative modules reachable from `entry`, and the bare package names imported statically (dynamic ones are optional backends). */
function importClosure (entry: string): { files: string[], packages: Set<string> } {
  const seen = new Set<string>()
  const packages = new Set<string>()
  const todo = [normalize(entry)]
  while (todo.length > 0) {
    const file = todo.pop()!
    if (seen.has(file)) continue
    seen.add(file)
    const src = readFileSync(file, 'utf8')
    for (const m of src.matchAll(/(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]|(?:^|\n)\s*import\s*['"]([^'"]+)['"]/g)) {
      const spec = m[1] ?? m[2]
      if (spec.startsWith('.')) todo.push(normalize(join(dirname(file), spec)))
      else if (!spec.startsWith('node:') && !builtinModules.includes(spec)) packages.add(spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0])
    }
  }
  return { files: [...seen], packages }
}

const pkg = JSON.parse(readFileSync('package.json', 'utf8'))
const chart = parse(readFileSync('charts/averaging-swarm/Chart.yaml', 'utf8'))
const values = parse(readFileSync('charts/averaging-swarm/values.yaml', 'utf8'))

describe('Dockerfiles', () => {
  // The agent image runs the agent bundled into one file (scripts/bundle-agent.mjs) from dist/agent/main.js: the
  // modules checked are the bundle's sources.
  for (const [file, main, source, defaultImage] of [
    ['Dockerfile.operator', 'dist/operator/main.js', 'dist/operator/main.js', `${values.image.repository}:${chart.appVersion}`],
    ['Dockerfile.agent', 'dist/agent-bundle/main.js', 'dist/agent/main.js', `${values.agent.image.repository}:${chart.appVersion}`]
  ] as const) {
    test(`${file}: starts ${main}, which exists and is built from copied sources and production dependencies only`, () => {
      const d = readDockerfile(file)
      assert.deepEqual(d.entrypoint, ['node', main])
      assert.ok(existsSync(main), `${main} exists after npm run build`)
      if (main !== source) {
        const text = readFileSync(file, 'utf8')
        assert.match(text, /^COPY scripts\/bundle-agent\.mjs scripts\/bundle-agent\.mjs$/m, `${file} copies the bundling script`)
        assert.match(text, /node scripts\/bundle-agent\.mjs \\\n && npm prune/, `${file} bundles the agent before the dev dependencies (esbuild) are pruned`)
      }
      const { files, packages } = importClosure(source)
      assert.ok(files.length > 5, 'the import walk found the entry point\'s modules')
      for (const f of files) {
        assert.ok(existsSync(f), `${f} exists`)
        const top = relative('dist', f).split('/')[0]
        assert.ok(d.copiedDirs.includes(top), `${f} comes from ${top}/, which ${file} copies (${d.copiedDirs.join(', ')})`)
      }
      for (const p of packages) assert.ok(p in pkg.dependencies, `${p} (imported by ${source}) is a production dependency, so npm prune --omit=dev keeps it`)
    })

    test(`${file}: multi-stage, non-root, tagged as the chart's default image`, () => {
      const d = readDockerfile(file)
      assert.ok(d.stages >= 2, 'multi-stage')
      assert.ok(d.user !== undefined && !/^(root|0)(:|$)/.test(d.user), `runs as a non-root user (USER ${d.user})`)
      assert.equal(d.image, defaultImage)
    })
  }

  test('the operator\'s default agent image is Dockerfile.agent\'s tag', () => {
    assert.equal(DEFAULT_BUILDER_CONFIG.defaultImage, readDockerfile('Dockerfile.agent').image)
  })

  test('the agent image installs tfjs-node-gpu on a CUDA base: the version package.json and the lock declare', () => {
    const text = readFileSync('Dockerfile.agent', 'utf8')
    assert.match(text, /^FROM nvidia\/cuda:\S+-cudnn\d+-runtime/m)
    // Declared: an optional dependency pinned to one version, which the lock holds, with its install script allowed.
    const version = pkg.optionalDependencies?.['@tensorflow/tfjs-node-gpu']
    assert.match(version ?? '', /^\d+\.\d+\.\d+$/, 'package.json pins @tensorflow/tfjs-node-gpu in optionalDependencies')
    const lock = JSON.parse(readFileSync('package-lock.json', 'utf8'))
    assert.equal(lock.packages['node_modules/@tensorflow/tfjs-node-gpu']?.version, version, 'package-lock.json holds that version')
    assert.equal(lock.packages['node_modules/@tensorflow/tfjs-node-gpu']?.optional, true)
    assert.equal(pkg.allowScripts?.['@tensorflow/tfjs-node-gpu'], true, 'its install script (the libtensorflow download) is allowed')
    // Installed: by npm ci from the lock, with optional dependencies, and checked (npm drops an optional package whose install fails).
    assert.match(text, /^RUN npm ci --include=optional\b/m)
    assert.match(text, /require\.resolve\('@tensorflow\/tfjs-node-gpu\/package\.json'\)/)
    assert.doesNotMatch(text, /npm (install|i|add) [^\n]*@tensorflow\/tfjs-node-gpu/, 'no hand-written install line beside the lock')
    assert.doesNotMatch(text, /--omit[= ]optional|--no-optional/)
  })
})
