/**
 * Prints a V8 heap profile (.heapprofile: `--heap-prof`, or major-gc-sampling.ts) by allocation site:
 * the functions that allocated the most sampled bytes, then the heaviest call stacks (5 frames).
 *
 *   node dist/tools/profile/heap-profile-summary.js FILE.heapprofile [--top 25]
 */
import { readFileSync } from 'node:fs'
import { parseArgs } from 'node:util'

interface ProfileNode {
  readonly id: number
  readonly selfSize: number
  readonly callFrame: { readonly functionName: string, readonly url: string, readonly lineNumber: number }
  readonly children: readonly ProfileNode[]
}

const { values, positionals } = parseArgs({ allowPositionals: true, options: { top: { type: 'string', default: '25' } } })
if (positionals.length !== 1) {
  console.error('usage: heap-profile-summary FILE.heapprofile [--top N]')
  process.exit(2)
}
const top = Number(values.top)
let head: ProfileNode
try {
  head = (JSON.parse(readFileSync(positionals[0], 'utf8')) as { head: ProfileNode }).head
} catch (err) {
  console.error(`cannot read ${positionals[0]} as a heap profile: ${err instanceof Error ? err.message : String(err)}`)
  process.exit(1)
}

const frameName = (n: ProfileNode): string => `${n.callFrame.functionName === '' ? '(anonymous)' : n.callFrame.functionName} ${n.callFrame.url.split('/').pop() ?? ''}:${n.callFrame.lineNumber + 1}`
const bySite = new Map<string, number>()
const byStack = new Map<string, number>()
let total = 0
const walk = (node: ProfileNode, stack: string[]): void => {
  const here = [frameName(node), ...stack]
  if (node.selfSize > 0) {
    total += node.selfSize
    bySite.set(here[0], (bySite.get(here[0]) ?? 0) + node.selfSize)
    const key = here.slice(0, 5).join(' < ')
    byStack.set(key, (byStack.get(key) ?? 0) + node.selfSize)
  }
  for (const child of node.children) walk(child, here)
}
walk(head, [])

const mb = (bytes: number): string => (bytes / 1e6).toFixed(2).padStart(8)
const print = (title: string, rows: Map<string, number>): void => {
  console.log(title)
  for (const [name, bytes] of [...rows].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${mb(bytes)} MB  ${name}`)
}
console.log(`${mb(total)} MB sampled in all`)
print('by allocating function:', bySite)
print('by stack (innermost first):', byStack)
