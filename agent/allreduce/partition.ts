/**
 * Cutting the flat parameter vector into parts and handing runs of parts to reducers (§3.2 of the notes).
 * Everything here is deterministic so every group member computes the same plan without talking.
 */

export interface Part {
  readonly index: number
  readonly tensorIndex: number
  /** Element offset in the flat vector. */
  readonly offset: number
  readonly length: number
}

/** Cut tensors (element counts) into parts of at most elementsPerPart elements; parts never cross tensor boundaries; zero-size tensors yield no parts. */
export function planParts (tensorSizes: ReadonlyArray<number>, elementsPerPart: number): Part[] {
  if (!Number.isSafeInteger(elementsPerPart) || elementsPerPart < 1) {
    throw new Error(`Parts must hold a positive whole number of elements, got ${String(elementsPerPart)}.`)
  }
  const parts: Part[] = []
  let base = 0
  for (let t = 0; t < tensorSizes.length; t++) {
    const size = tensorSizes[t]
    if (!Number.isSafeInteger(size) || size < 0) {
      throw new Error(`Tensor ${t} has size ${String(size)}; sizes must be non-negative integers.`)
    }
    for (let o = 0; o < size; o += elementsPerPart) {
      parts.push(Object.freeze({ index: parts.length, tensorIndex: t, offset: base + o, length: Math.min(elementsPerPart, size - o) }))
    }
    base += size
  }
  return parts
}

/** elementsPerPart for a codec: max(1, floor(partSizeBytes / bytesPerElement)). */
export function elementsPerPart (partSizeBytes: number, bytesPerElement: number): number {
  if (!(Number.isFinite(partSizeBytes) && partSizeBytes > 0)) {
    throw new Error(`Part size must be a positive number of bytes, got ${String(partSizeBytes)}.`)
  }
  if (!(Number.isFinite(bytesPerElement) && bytesPerElement > 0)) {
    throw new Error(`Bytes per element must be a positive number, got ${String(bytesPerElement)}.`)
  }
  return Math.max(1, Math.floor(partSizeBytes / bytesPerElement))
}

/**
 * Assign parts to reducers: returns partsPerPeer[i] (contiguous runs in peer order). Span pivots = cumulative
 * fractions × total elements; a part straddling a pivot goes to the peer owning the larger share of it (hivemind's
 * rule; on a tie the earlier peer); peers with fraction 0 get 0 parts. Sum = parts.length. Deterministic: every
 * group member computes the same result.
 *
 * Parts must be in order and contiguous from offset 0 (as planParts makes them), each at least one element long.
 * Pivots are floor(cumulative fraction × total), the last one exactly the total, as in hivemind.
 */
export function assignParts (parts: ReadonlyArray<Part>, fractions: ReadonlyArray<number>): number[] {
  const peers = fractions.length
  for (let i = 0; i < peers; i++) {
    if (!(Number.isFinite(fractions[i]) && fractions[i] >= 0)) {
      throw new Error(`Fraction ${i} is ${String(fractions[i])}; fractions must be finite numbers >= 0.`)
    }
  }
  const fractionSum = fractions.reduce((sum, f) => sum + f, 0)
  if (!(fractionSum > 0)) throw new Error('Cannot assign parts: no peer has a positive fraction.')

  let total = 0
  for (let k = 0; k < parts.length; k++) {
    const part = parts[k]
    if (part.offset !== total || !Number.isSafeInteger(part.length) || part.length < 1) {
      throw new Error(`Part ${k} (offset ${part.offset}, length ${part.length}) does not continue the previous parts at offset ${total} with a positive length.`)
    }
    total += part.length
  }

  const pivots: number[] = []
  let cumulative = 0
  for (let i = 0; i < peers; i++) {
    cumulative += fractions[i] / fractionSum
    pivots.push(Math.min(total, Math.floor(cumulative * total)))
  }
  // The last peer with a positive fraction ends the vector (later zero-fraction peers keep an empty span).
  let last = peers - 1
  while (fractions[last] === 0) last--
  for (let i = last; i < peers; i++) pivots[i] = total

  const counts = new Array<number>(peers).fill(0)
  let peer = 0
  let position = 0
  for (const part of parts) {
    const end = position + part.length
    if (end > pivots[peer]) {
      // The part straddles one or more pivots: give it to the peer whose span covers most of it.
      let bestPeer = peer
      let bestShare = pivots[peer] - position
      while (end > pivots[peer]) {
        peer++
        const share = Math.min(end, pivots[peer]) - pivots[peer - 1]
        if (share > bestShare) { bestShare = share; bestPeer = peer }
      }
      counts[bestPeer]++
    } else {
      counts[peer]++
    }
    position = end
  }
  return counts
}
