/** Operator configuration from flags, each with an environment variable for the chart's Deployment. */
import { Command, Option } from 'commander'
import { hostname } from 'node:os'
import { DEFAULT_BUILDER_CONFIG } from './builders/config.js'
import { LEADER_DEFAULTS } from './leader.js'
import { AGENT_ENV } from '../api/agent-env.js'

export interface OperatorOptions {
  kubeconfig?: string
  watchNamespace?: string
  leaderElect: boolean
  leaseNamespace: string
  leaseName: string
  identity: string
  workers: number
  metricsBindAddress: string
  agentImage: string
  clusterDomain: string
  agentDnsServers?: string
  agentCommand?: string[]
  resyncSeconds: number
  progressIntervalSeconds: number
  logLevel: string
  leaseDurationMs: number
  renewDeadlineMs: number
  retryPeriodMs: number
}

const int = (v: string) => { const n = Number(v); if (!Number.isInteger(n) || n < 0) throw new Error(`not a whole number: ${v}`); return n }

export function parseOptions (argv: string[]): OperatorOptions {
  const c = new Command('averaging-swarm-operator')
    .description('Reconciles AveragingSwarm objects into swarms of averaging agents.')
    .addOption(new Option('--kubeconfig <path>', 'kubeconfig file; in-cluster config or $KUBECONFIG when unset').env('KUBECONFIG'))
    .addOption(new Option('--watch-namespace <ns>', 'only watch this namespace (all namespaces when unset)').env('WATCH_NAMESPACE'))
    .addOption(new Option('--no-leader-elect', 'run without a Lease (a single replica only)'))
    .addOption(new Option('--lease-namespace <ns>', 'namespace of the leader-election Lease').env('POD_NAMESPACE').default('default'))
    .addOption(new Option('--lease-name <name>', 'name of the leader-election Lease').default('averaging-swarm-operator'))
    .addOption(new Option('--identity <id>', 'this replica\'s name in the Lease').env('POD_NAME').default(`${hostname()}-${process.pid}`))
    .addOption(new Option('--workers <n>', 'swarms reconciled in parallel').env('OPERATOR_WORKERS').default(4).argParser(int))
    .addOption(new Option('--metrics-bind-address <host:port>', 'address of /metrics, /healthz and /readyz').env('METRICS_BIND_ADDRESS').default('0.0.0.0:8080'))
    .addOption(new Option('--agent-image <image>', 'agent image when a swarm sets none').env('AGENT_IMAGE').default(DEFAULT_BUILDER_CONFIG.defaultImage))
    .addOption(new Option('--cluster-domain <domain>', 'cluster DNS domain for bootstrap multiaddrs').env('CLUSTER_DOMAIN').default(DEFAULT_BUILDER_CONFIG.clusterDomain))
    .addOption(new Option('--agent-dns-servers <list>', `${AGENT_ENV.dnsServers.name} given to agents (host:port,…)`).env('AGENT_DNS_SERVERS'))
    .addOption(new Option('--agent-command <json>', 'JSON array: the agent container\'s command').env('AGENT_COMMAND'))
    .addOption(new Option('--resync-seconds <n>', 'requeue every swarm this often').default(300).argParser(int))
    .addOption(new Option('--progress-interval-seconds <n>', 'how often agents\' /metrics are sampled for status').env('PROGRESS_INTERVAL_SECONDS').default(15).argParser(int))
    .addOption(new Option('--log-level <level>', 'trace, debug, info, warn or error').env('LOG_LEVEL').default('info'))
    .addOption(new Option('--lease-duration-ms <n>').default(LEADER_DEFAULTS.leaseDurationMs).argParser(int))
    .addOption(new Option('--renew-deadline-ms <n>').default(LEADER_DEFAULTS.renewDeadlineMs).argParser(int))
    .addOption(new Option('--retry-period-ms <n>').default(LEADER_DEFAULTS.retryPeriodMs).argParser(int))
  c.parse(argv, { from: 'user' })
  const o = c.opts()
  let agentCommand: string[] | undefined
  if (o.agentCommand !== undefined) {
    const parsed: unknown = JSON.parse(o.agentCommand)
    if (!Array.isArray(parsed) || !parsed.every(x => typeof x === 'string')) throw new Error('--agent-command must be a JSON array of strings.')
    agentCommand = parsed
  }
  return { ...o, agentCommand } as OperatorOptions
}
