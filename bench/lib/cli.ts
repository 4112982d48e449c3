/** Command-line values the benchmarks share. */

/**
 * A comma-separated list of numbers (`--peers 64,256`), each within [min, max]: a clear error naming
 * the option for anything else, so a typo is not silently dropped nor run as NaN.
 */
export function numberList (text: string, option: string, min = -Infinity, max = Infinity): number[] {
  return text.split(',').map(item => {
    const value = item.trim() === '' ? NaN : Number(item)
    if (!Number.isFinite(value) || value < min || value > max) {
      throw new Error(`${option} takes a comma-separated list of numbers${Number.isFinite(min) ? ` from ${min}` : ''}${Number.isFinite(max) ? ` to ${max}` : ''}, not "${item.trim()}"`)
    }
    return value
  })
}
