import { test } from 'node:test'
import assert from 'node:assert/strict'
import { pino } from 'pino'
import { Writable } from 'node:stream'
import { linesLog, silentLog, type Log } from '../../agent/log.js'

test('linesLog writes the lines at its level and above, each naming its level and component', () => {
  const lines: string[] = []
  const log = linesLog((l) => { lines.push(l) }, 'warn').child({ component: 'averager' }).child({ component: 'allreduce' })
  log.debug('a replica timed out')
  log.info('joined a group')
  log.warn('keeping 3 parts local')
  log.error('the data thread died')
  assert.deepEqual(lines, ['warn [averager/allreduce] keeping 3 parts local', 'error [averager/allreduce] the data thread died'])
})

test('silentLog says nothing and its children are silent too', () => {
  assert.equal(silentLog.child({ component: 'x' }), silentLog)
  silentLog.warn('nothing to see')
})

test("pino's logger is a Log: a component's lines carry the component and keep the level", () => {
  const out: string[] = []
  const sink = new Writable({ write (chunk, _enc, done) { out.push(String(chunk)); done() } })
  const log: Log = pino({ level: 'info' }, sink)
  log.child({ component: 'matchmaker' }).debug('hidden at info')
  log.child({ component: 'matchmaker' }).warn('declaring failed')
  assert.equal(out.length, 1)
  const line = JSON.parse(out[0]) as { level: number, component: string, msg: string }
  assert.deepEqual([line.level, line.component, line.msg], [40, 'matchmaker', 'declaring failed'])
})
