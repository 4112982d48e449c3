/**
 * Random strings matching a regular expression, for the subset the CRD's patterns use: anchors,
 * groups, alternation, character classes with ranges, escapes and the quantifiers ? * + {n} {m,n}.
 * Unbounded repetition is cut at a few; the caller checks the result against the pattern (and its
 * length bounds) and draws again when it misses, so the sampler needs to be likely, not exact.
 */

type Node =
  | { kind: 'chars', set: string }
  | { kind: 'seq', items: Node[] }
  | { kind: 'alt', options: Node[] }
  | { kind: 'repeat', node: Node, min: number, max: number }
  | { kind: 'anchor' }

const PRINTABLE = Array.from({ length: 95 }, (_, i) => String.fromCharCode(32 + i)).join('')

class Parser {
  private at = 0
  constructor (private readonly src: string) {}

  parse (): Node {
    const node = this.alternation()
    if (this.at < this.src.length) throw new Error(`pattern-sampler: unexpected "${this.src[this.at]}" at ${this.at} in ${this.src}`)
    return node
  }

  private alternation (): Node {
    const options = [this.sequence()]
    while (this.src[this.at] === '|') { this.at++; options.push(this.sequence()) }
    return options.length === 1 ? options[0] : { kind: 'alt', options }
  }

  private sequence (): Node {
    const items: Node[] = []
    while (this.at < this.src.length && this.src[this.at] !== '|' && this.src[this.at] !== ')') items.push(this.quantified(this.atom()))
    return { kind: 'seq', items }
  }

  private atom (): Node {
    const c = this.src[this.at++]
    if (c === '^' || c === '$') return { kind: 'anchor' }
    if (c === '(') {
      if (this.src.startsWith('?:', this.at)) this.at += 2
      const inner = this.alternation()
      if (this.src[this.at++] !== ')') throw new Error(`pattern-sampler: unclosed group in ${this.src}`)
      return inner
    }
    if (c === '[') return { kind: 'chars', set: this.charClass() }
    if (c === '.') return { kind: 'chars', set: PRINTABLE }
    if (c === '\\') return { kind: 'chars', set: this.escape() }
    return { kind: 'chars', set: c }
  }

  private escape (): string {
    const e = this.src[this.at++]
    if (e === 'd') return '0123456789'
    if (e === 'w') return 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_'
    return e
  }

  private charClass (): string {
    if (this.src[this.at] === '^') throw new Error(`pattern-sampler: negated classes are not supported (${this.src})`)
    let set = ''
    let first = true
    while (this.src[this.at] !== ']' || first) {
      first = false
      let c = this.src[this.at++]
      if (c === '\\') c = this.escape()
      if (this.src[this.at] === '-' && this.src[this.at + 1] !== ']') {
        this.at++
        let to = this.src[this.at++]
        if (to === '\\') to = this.escape()
        for (let k = c.charCodeAt(0); k <= to.charCodeAt(0); k++) set += String.fromCharCode(k)
      } else set += c
    }
    this.at++
    return set
  }

  private quantified (node: Node): Node {
    const q = this.src[this.at]
    if (q === '?') { this.at++; return { kind: 'repeat', node, min: 0, max: 1 } }
    if (q === '*') { this.at++; return { kind: 'repeat', node, min: 0, max: 3 } }
    if (q === '+') { this.at++; return { kind: 'repeat', node, min: 1, max: 3 } }
    if (q === '{') {
      const close = this.src.indexOf('}', this.at)
      const [lo, hi] = this.src.slice(this.at + 1, close).split(',')
      this.at = close + 1
      const min = Number(lo)
      return { kind: 'repeat', node, min, max: hi === undefined ? min : hi === '' ? min + 3 : Number(hi) }
    }
    return node
  }
}

function generate (node: Node, random: () => number, out: string[]): void {
  switch (node.kind) {
    case 'chars': out.push(node.set[Math.floor(random() * node.set.length)]); return
    case 'seq': for (const item of node.items) generate(item, random, out); return
    case 'alt': generate(node.options[Math.floor(random() * node.options.length)], random, out); return
    case 'repeat': {
      // Short repetitions most of the time, the longest now and then (the edges of a length).
      const n = random() < 0.15 ? node.max : node.min + Math.floor(random() * (Math.min(node.max, node.min + 3) - node.min + 1))
      for (let i = 0; i < n; i++) generate(node.node, random, out)
      return
    }
    case 'anchor': return
  }
}

const parsed = new Map<string, Node>()

/** One random string that likely matches `pattern`; check it with the pattern itself. */
export function samplePattern (pattern: string, random: () => number): string {
  let node = parsed.get(pattern)
  if (node === undefined) { node = new Parser(pattern).parse(); parsed.set(pattern, node) }
  const out: string[] = []
  generate(node, random, out)
  return out.join('')
}
