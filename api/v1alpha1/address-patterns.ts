/**
 * Regular expressions (ECMA and RE2 alike, as the API server and the local runtime both apply them)
 * for the addresses a swarm spec names: hosts, ports and libp2p multiaddrs. Strict enough that an
 * address they admit is one the agent can parse (test/operator/api/crd.test.ts, bootstrap-peers.test.ts).
 */

/** A DNS label. */
export const LABEL = '[a-zA-Z0-9]([-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?'
/** A DNS name (dotted IPv4 addresses are DNS names too). */
export const HOSTNAME = `${LABEL}(\\.${LABEL})*`
/** An IPv4 address, octets without leading zeros. */
const OCTET = '(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])'
export const IPV4 = `${OCTET}(\\.${OCTET}){3}`
/** An IPv6 address in any of its compressed forms (no zone, no embedded IPv4). */
export const IPV6 = '([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,7}:|([0-9a-fA-F]{1,4}:){1,6}:[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,5}(:[0-9a-fA-F]{1,4}){1,2}|([0-9a-fA-F]{1,4}:){1,4}(:[0-9a-fA-F]{1,4}){1,3}|([0-9a-fA-F]{1,4}:){1,3}(:[0-9a-fA-F]{1,4}){1,4}|([0-9a-fA-F]{1,4}:){1,2}(:[0-9a-fA-F]{1,4}){1,5}|[0-9a-fA-F]{1,4}:(:[0-9a-fA-F]{1,4}){1,6}|:((:[0-9a-fA-F]{1,4}){1,7}|:)'
/** A TCP port, 0 to 65535, without leading zeros (multiaddr refuses "0080"). */
export const PORT = '(0|[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])'
/** base58btc's alphabet, in ASCII order: so base58 strings of one length sort as the numbers they spell. */
const BASE58_ALPHABET = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz'
const BASE58 = '[1-9A-HJ-NP-Za-km-z]'

/** Bytes in base58btc, a leading zero byte as '1' (as multiformats writes a peer id). */
export function base58 (bytes: readonly number[]): string {
  let n = bytes.reduce((acc, b) => (acc << 8n) | BigInt(b), 0n)
  let out = ''
  while (n > 0n) { out = BASE58_ALPHABET[Number(n % 58n)] + out; n /= 58n }
  for (const b of bytes) { if (b !== 0) break; out = '1' + out }
  return out
}

/** A character class of the base58 characters from..to (alphabet order), as ASCII runs. */
function charClass (from: number, to: number): string {
  const chars = BASE58_ALPHABET.slice(from, to + 1)
  if (chars.length === 1) return chars
  let out = ''
  for (let i = 0; i < chars.length;) {
    let j = i
    while (j + 1 < chars.length && chars.charCodeAt(j + 1) === chars.charCodeAt(j) + 1) j++
    out += j - i >= 2 ? `${chars[i]}-${chars[j]}` : chars.slice(i, j + 1)
    i = j + 1
  }
  return `[${out}]`
}

const anyOf = (n: number): string => n === 0 ? '' : n === 1 ? BASE58 : `${BASE58}{${n}}`

/** base58 strings of bound's length that sort at or above it (`above`) or at or below it. */
function bounded (bound: string, above: boolean): string {
  if (bound === '') return ''
  const first = BASE58_ALPHABET.indexOf(bound[0])
  const rest = bound.slice(1)
  // Past the first character nothing is bounded: it is the lowest (or highest) string of its length.
  if ([...rest].every(c => c === (above ? '1' : 'z'))) return (above ? charClass(first, 57) : charClass(0, first)) + anyOf(rest.length)
  const beyond = above ? (first < 57 ? charClass(first + 1, 57) : null) : (first > 0 ? charClass(0, first - 1) : null)
  const same = bound[0] + bounded(rest, above)
  return beyond == null ? same : `(${same}|${beyond}${anyOf(rest.length)})`
}

/** base58 strings from lo to hi (both of one length), inclusive: a numeric range as a pattern. */
export function base58Range (lo: string, hi: string): string {
  if (lo.length !== hi.length || lo > hi) throw new Error(`not a range of base58 strings of one length: ${lo}..${hi}`)
  let i = 0
  while (i < lo.length && lo[i] === hi[i]) i++
  if (i === lo.length) return lo
  const n = lo.length - i - 1
  const a = BASE58_ALPHABET.indexOf(lo[i])
  const b = BASE58_ALPHABET.indexOf(hi[i])
  const middle = b - a > 1 ? [charClass(a + 1, b - 1) + anyOf(n)] : []
  return `${lo.slice(0, i)}(${[lo[i] + bounded(lo.slice(i + 1), true), ...middle, hi[i] + bounded(hi.slice(i + 1), false)].join('|')})`
}

/**
 * The multihash inside every Ed25519 peer id: the identity hash (0x00) of 36 bytes (0x24), the
 * key's protobuf: type Ed25519 (0x08 0x01), then its 32 bytes (0x12 0x20).
 */
const ED25519_PEER_ID_PREFIX = [0x00, 0x24, 0x08, 0x01, 0x12, 0x20]

/**
 * A libp2p peer id of an Ed25519 key (12D3KooW…), which every agent has (AVS_IDENTITY_KEY): exactly
 * the base58 strings whose bytes are such a multihash, the range from the prefix and 32 zero bytes
 * to the prefix and 32 bytes of 0xff, so a peer id the pattern admits is one the agent parses.
 * ("12D3KooW" and 44 characters alone admitted ~1 in 60 one-character typos that are no key.)
 */
export const PEER_ID = base58Range(
  base58([...ED25519_PEER_ID_PREFIX, ...new Array<number>(32).fill(0)]),
  base58([...ED25519_PEER_ID_PREFIX, ...new Array<number>(32).fill(0xff)])
)

/** A dialable libp2p TCP multiaddr ending in /p2p/<peer id>. */
export const MULTIADDR_PATTERN = `^/(ip4/${IPV4}|ip6/(${IPV6})|(dns|dns4|dns6|dnsaddr)/${HOSTNAME})/tcp/${PORT}/p2p/${PEER_ID}$`
