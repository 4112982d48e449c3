// Helpers of the reliability tests whose real agent processes live in network namespaces
// (node-port.test.ts, relay-restart.test.ts).
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'

const exec = promisify(execFile)

/** GET http://<ip>:<port>/metrics from inside a namespace (the agent's metrics listen on its pod address there). */
export async function metricsIn (ns: string, url: string): Promise<string> {
  const script = 'fetch(process.argv[1], { signal: AbortSignal.timeout(5000) }).then(r => r.text()).then(t => process.stdout.write(t), e => { console.error(String(e)); process.exit(1) })'
  return (await exec('ip', ['netns', 'exec', ns, process.execPath, '-e', script, url], { maxBuffer: 16 << 20 })).stdout
}
