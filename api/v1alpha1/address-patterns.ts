/**
 * Regular expressions (ECMA and RE2 alike, as the API server and the local runtime both apply them)
 * for the addresses a swarm spec names: hosts, ports and libp2p multiaddrs. Strict enough that an
 * address they admit is one the agent can parse (test/operator/api/crd.test.ts checks that).
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
/**
 * A libp2p peer id in base58btc, by key type: Ed25519 (12D3KooW…, what agents have), RSA (Qm…) and
 * secp256k1 (16Uiu2HA…). A pattern cannot check the multihash inside, so the agent still checks it.
 */
const BASE58 = '[1-9A-HJ-NP-Za-km-z]'
export const PEER_ID = `(12D3KooW${BASE58}{44}|Qm${BASE58}{44}|16Uiu2HA${BASE58}{45})`
/** A dialable libp2p TCP multiaddr ending in /p2p/<peer id>. */
export const MULTIADDR_PATTERN = `^/(ip4/${IPV4}|ip6/(${IPV6})|(dns|dns4|dns6|dnsaddr)/${HOSTNAME})/tcp/${PORT}/p2p/${PEER_ID}$`
