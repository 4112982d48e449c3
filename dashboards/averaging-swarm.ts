/**
 * The Grafana dashboard the chart ships (dashboards/averaging-swarm.json, written by
 * `npm run generate:dashboard`; test/unit/dashboard.test.ts fails when the committed file differs).
 * Metric names and labels come from api/metric-names.ts only.
 */
import { AGENT_METRICS as A, CONTROLLER, OPERATOR_METRICS as O } from '../api/metric-names.js'
import { dashboard, datasourceVariable, histogramPart, increase, labelValues, quantile, queryVariable, rate, series, type Dashboard } from './builder.js'

export const DASHBOARD_FILE = 'dashboards/averaging-swarm.json'

/** The dashboard's Namespace and Swarm variables, as every swarm query filters by them. */
const BY_SWARM = { namespace: { re: '$namespace' }, swarm: { re: '$swarm' } } as const
const BY_CONTROLLER = { controller: CONTROLLER } as const

export function buildDashboard (): Dashboard {
  return dashboard({
    uid: 'averaging-swarm',
    title: 'AveragingSwarm',
    tags: ['averaging-swarm', 'libp2p', 'operator'],
    description: 'Decentralized averaging swarms: rounds, latency, traffic, convergence, and the operator.',
    refresh: '30s',
    time: { from: 'now-1h', to: 'now' },
    variables: [
      datasourceVariable(),
      queryVariable('namespace', 'Namespace', labelValues(A.rounds, 'namespace')),
      queryVariable('swarm', 'Swarm', labelValues(A.rounds, 'swarm', { namespace: BY_SWARM.namespace }))
    ],
    panels: [
      {
        title: 'Rounds per second by outcome',
        description: 'Averaging rounds the agents finish each second: success, partial (a peer failed mid-round, its span kept local) or failure.',
        unit: 'ops',
        queries: [{ expr: `sum by (outcome) (${rate(series(A.rounds, BY_SWARM))})`, legend: '{{outcome}}' }]
      },
      {
        title: 'Matchmaking latency',
        description: 'Time from an agent starting a round to an assembled group.',
        unit: 's',
        queries: [
          { expr: quantile(0.5, A.matchmakingSeconds, BY_SWARM), legend: 'p50' },
          { expr: quantile(0.95, A.matchmakingSeconds, BY_SWARM), legend: 'p95' }
        ]
      },
      {
        title: 'All-reduce latency',
        description: 'Butterfly all-reduce duration once the group formed.',
        unit: 's',
        queries: [
          { expr: quantile(0.5, A.allreduceSeconds, BY_SWARM), legend: 'p50' },
          { expr: quantile(0.95, A.allreduceSeconds, BY_SWARM), legend: 'p95' }
        ]
      },
      {
        title: 'Group size',
        description: 'Members of the groups agents averaged in (targetGroupSize is the ceiling).',
        unit: 'short',
        queries: [
          { expr: `sum(${rate(histogramPart(A.groupSize, 'sum', BY_SWARM))}) / sum(${rate(histogramPart(A.groupSize, 'count', BY_SWARM))})`, legend: 'mean' },
          { expr: quantile(0.95, A.groupSize, BY_SWARM), legend: 'p95' }
        ]
      },
      {
        title: 'All-reduce throughput per agent',
        description: 'Tensor bytes an agent sends plus receives per second of all-reduce time.',
        unit: 'Bps',
        queries: [{
          expr: `(sum(${rate(series(A.bytesSent, BY_SWARM))}) + sum(${rate(series(A.bytesReceived, BY_SWARM))})) / sum(${rate(histogramPart(A.allreduceSeconds, 'sum', BY_SWARM))})`,
          legend: 'bytes/s while reducing'
        }]
      },
      {
        title: 'Bytes in / out',
        description: 'Tensor bytes the whole swarm receives and sends in all-reduce rounds.',
        unit: 'Bps',
        queries: [
          { expr: `sum(${rate(series(A.bytesReceived, BY_SWARM))})`, legend: 'in' },
          { expr: `sum(${rate(series(A.bytesSent, BY_SWARM))})`, legend: 'out' }
        ]
      },
      {
        title: 'Late members cut off, groups assembled early',
        description: 'Group members left out for being late, by the deadline that cut them off. Senders: a reducer left them out of its span; reducers: a sender ' +
          'kept their span local. Adaptive: they owed a part (or its mean) the majority had delivered, and waited past the median of the others\' waits plus 4 scaled MADs, ' +
          'at least two request timeouts over it. Fixed: the sender or reducer timeout, or the all-reduce timeout. ' +
          'Where adaptive dominates, dead or stalled members cost a few seconds each instead of a whole timeout. ' +
          'Groups assembled early: leaders that stopped waiting for members who were not coming (a quorum in, past median + k·MAD of past arrivals, ' +
          'nobody else looking under the key) instead of waiting out averagingExpiration.',
        unit: 'short',
        queries: [
          { expr: `sum by (deadline) (${increase(series(A.senderCutoffs, BY_SWARM))})`, legend: 'senders, {{deadline}}' },
          { expr: `sum by (deadline) (${increase(series(A.reducerCutoffs, BY_SWARM))})`, legend: 'reducers, {{deadline}}' },
          { expr: `sum(${increase(series(A.earlyAssemblies, BY_SWARM))})`, legend: 'groups assembled early' }
        ]
      },
      {
        title: 'Declared bandwidth',
        description: 'The bandwidth agents declared to their last group (the spec\'s, else the link rate each measured), which sizes the spans they reduce. ' +
          '0 until an agent has declared one.',
        unit: 'Bps',
        queries: [
          { expr: `avg(${series(A.declaredBandwidth, BY_SWARM)})`, legend: 'mean' },
          { expr: `min(${series(A.declaredBandwidth, BY_SWARM)})`, legend: 'min' },
          { expr: `max(${series(A.declaredBandwidth, BY_SWARM)})`, legend: 'max' }
        ]
      },
      {
        title: 'Rounds by codec',
        description: 'All-reduces per second by the codec their group used; with compression: auto, each group picks none or float16 from the times its members measured. Delta rounds: those whose lossy codec carried changes since a round the whole group landed, not values. Pseudo-gradient rounds: DiLoCo outer steps whose group held one outer state and averaged the pseudo-gradients alone.',
        unit: 'ops',
        queries: [
          { expr: `sum by (codec) (${rate(series(A.codecRounds, BY_SWARM))})`, legend: '{{codec}}' },
          { expr: `sum(${rate(series(A.deltaRounds, BY_SWARM))})`, legend: 'delta rounds' },
          { expr: `sum(${rate(series(A.pseudoGradientRounds, BY_SWARM))})`, legend: 'pseudo-gradient rounds' }
        ]
      },
      {
        title: 'Peers connected',
        description: 'libp2p connections per agent and the Kademlia routing table size.',
        unit: 'short',
        queries: [
          { expr: `avg(${series(A.peersConnected, BY_SWARM)})`, legend: 'mean' },
          { expr: `min(${series(A.peersConnected, BY_SWARM)})`, legend: 'min' },
          { expr: `avg(${series(A.routingTableSize, BY_SWARM)})`, legend: 'DHT routing table (mean)' }
        ]
      },
      {
        title: 'How peers are reached',
        description: 'Open libp2p connections by kind: direct, hole-punched (DCUtR upgraded a relayed one) or relayed through a member (circuit relay v2); ' +
          'agents behind NAT with and without a relay slot (the latter average as clients), and the bytes relays carry.',
        unit: 'short',
        queries: [
          { expr: `sum by (kind) (${series(A.connections, BY_SWARM)})`, legend: '{{kind}} connections' },
          { expr: `sum(${series(A.reachability, { ...BY_SWARM, kind: 'relayed' })})`, legend: 'agents reached through a relay' },
          { expr: `sum(${series(A.reachability, { ...BY_SWARM, kind: 'unreachable' })})`, legend: 'unreachable agents (clients)' },
          { expr: `sum(${rate(series(A.relayedBytes, BY_SWARM))})`, legend: 'relayed bytes/s' }
        ],
        overrides: { D: [{ id: 'unit', value: 'Bps' }, { id: 'custom.axisPlacement', value: 'right' }] }
      },
      {
        title: 'Parameter divergence',
        description: 'How far each round moved an agent\'s tensors (relative L2); falls as the swarm converges.',
        unit: 'percentunit',
        queries: [
          { expr: `avg(${series(A.divergence, BY_SWARM)})`, legend: 'mean' },
          { expr: `max(${series(A.divergence, BY_SWARM)})`, legend: 'max' }
        ]
      },
      {
        title: 'Training loss',
        description: 'Builtin workload: the last step\'s loss and the held-out loss after the last round.',
        unit: 'short',
        queries: [
          { expr: `avg(${series(A.trainingLoss, BY_SWARM)})`, legend: 'training (mean)' },
          { expr: `avg(${series(A.heldOutLoss, BY_SWARM)})`, legend: 'held-out (mean)' }
        ]
      },
      {
        title: 'State downloads',
        description: 'New or restarted agents loading the current tensors from a live peer, and the downloads agents served.',
        unit: 'short',
        queries: [
          { expr: `sum by (outcome) (${increase(series(A.stateDownloads, BY_SWARM))})`, legend: 'downloads {{outcome}}' },
          { expr: `sum(${increase(series(A.stateUploads, BY_SWARM))})`, legend: 'served' }
        ]
      },
      {
        title: 'Checkpoints',
        description: 'The newest round any agent knows durably checkpointed (right axis), how long checkpoint writes take, ' +
          'and failed writes (a full or unwritable volume; the swarm\'s CheckpointsFailing condition says so too). Swarms without spec.checkpoint report nothing here.',
        unit: 's',
        queries: [
          { expr: `max(${series(A.checkpointRound, BY_SWARM)})`, legend: 'newest checkpointed round' },
          { expr: quantile(0.95, A.checkpointSeconds, BY_SWARM), legend: 'write p95' },
          { expr: `sum(${increase(series(A.checkpointWrites, { ...BY_SWARM, outcome: 'failed' }))})`, legend: 'failed writes' }
        ],
        overrides: {
          A: [{ id: 'unit', value: 'short' }, { id: 'decimals', value: 0 }, { id: 'custom.axisPlacement', value: 'right' }],
          C: [{ id: 'unit', value: 'short' }, { id: 'decimals', value: 0 }]
        }
      },
      {
        title: 'Agents desired / ready',
        description: 'From the operator: agents the swarms want and agents that are Ready.',
        unit: 'short',
        queries: [
          { expr: `sum(${series(O.desired, BY_SWARM)})`, legend: 'desired' },
          { expr: `sum(${series(O.ready, BY_SWARM)})`, legend: 'ready' }
        ]
      },
      {
        title: 'Operator reconciles',
        description: 'Reconciles per second by result, and failed reconciles.',
        unit: 'ops',
        queries: [
          { expr: `sum by (result) (${rate(series(O.reconcileTotal, BY_CONTROLLER))})`, legend: '{{result}}' },
          { expr: `sum(${rate(series(O.reconcileErrors, BY_CONTROLLER))})`, legend: 'errors' }
        ]
      },
      {
        title: 'Operator reconcile latency and queue',
        description: 'Reconcile duration and keys waiting in the work queue.',
        unit: 's',
        queries: [
          { expr: quantile(0.95, O.reconcileTime, BY_CONTROLLER), legend: 'reconcile p95' },
          { expr: `sum(${series(O.queueDepth, { name: CONTROLLER })})`, legend: 'queue depth (keys)' }
        ]
      },
      {
        title: 'Swarm phase',
        description: 'The phase of each swarm as the operator reports it (1 = current).',
        unit: 'short',
        queries: [{ expr: `sum by (swarm, phase) (${series(O.phase, BY_SWARM)} == 1)`, legend: '{{swarm}}: {{phase}}' }]
      },
      {
        title: 'Trainer loss and parameter hash',
        description: 'Sidecar trainers (POST /v1/report): the last loss they reported, the samples they train on per second (right axis), ' +
          'and how many distinct parameter hashes the members of each swarm report: 1 when every member holds the same parameters, ' +
          'as a healthy DiLoCo group does after its outer steps. Builtin-workload swarms report nothing here (zeros).',
        unit: 'short',
        queries: [
          { expr: `avg(${series(A.trainerLoss, BY_SWARM)})`, legend: 'loss (mean)' },
          { expr: `sum(${rate(series(A.trainerSamples, BY_SWARM))})`, legend: 'samples/s' },
          { expr: `count by (swarm) (count_values by (swarm) ("hash", ${series(A.paramsHash, BY_SWARM)}))`, legend: '{{swarm}}: distinct parameter hashes' }
        ],
        overrides: {
          B: [{ id: 'unit', value: 'cps' }, { id: 'custom.axisPlacement', value: 'right' }],
          C: [{ id: 'decimals', value: 0 }]
        }
      }
    ]
  })
}

/** The file's text: two-space JSON and a final newline. */
export function renderDashboardJson (): string {
  return JSON.stringify(buildDashboard(), null, 2) + '\n'
}
