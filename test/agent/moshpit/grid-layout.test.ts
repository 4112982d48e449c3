import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { GridLayout, rankFromPodName, readMembership } from '../../../agent/moshpit/grid-layout.js'
import { bitsFromKey, gridGroupBits } from '../../../agent/moshpit/group-bits.js'

function membersDir (members?: string, bootstrap?: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'avs-members-'))
  if (members !== undefined) writeFileSync(join(dir, 'members'), members)
  if (bootstrap !== undefined) writeFileSync(join(dir, 'bootstrap'), bootstrap)
  return dir
}

test('bootstrap agents rank first, regular agents after them, and nothing else has a rank', () => {
  const m = { members: 10, bootstrap: 2 }
  assert.equal(rankFromPodName('s-bootstrap-0-0', m), 0)
  assert.equal(rankFromPodName('s-bootstrap-1-0', m), 1)
  assert.equal(rankFromPodName('s-agent-0', m), 2)
  assert.equal(rankFromPodName('my-swarm-agent-7', m), 9)
  assert.equal(rankFromPodName('s-agent-8', m), undefined, 'a pod of a scale-down still stopping is off the grid')
  assert.equal(rankFromPodName('s-bootstrap-2-0', m), undefined, 'more bootstrap agents than the membership counts')
  assert.equal(rankFromPodName('s-aux-0', m), undefined)
  assert.equal(rankFromPodName('laptop', m), undefined)
})

test('the membership is read from the mounted files, and missing or malformed files give none', () => {
  assert.deepEqual(readMembership(membersDir('16\n', '1')), { members: 16, bootstrap: 1 })
  assert.equal(readMembership(membersDir('16')), undefined, 'no bootstrap file yet')
  assert.equal(readMembership(membersDir('-3', '1')), undefined)
  assert.equal(readMembership(membersDir('1e3', '1')), undefined)
  assert.equal(readMembership(membersDir('4', '5')), undefined, 'more bootstrap agents than members')
  assert.equal(readMembership('/nonexistent/avs-members'), undefined)
})

test("an agent's grid bits follow the membership as it is rewritten: 16 members, then 64", () => {
  const dir = membersDir('16', '1')
  try {
    const layout = new GridLayout(dir, 's-agent-4', 4)
    assert.equal(layout.bits(), gridGroupBits(5, 16, 4))
    assert.equal(layout.bits(), '01')
    writeFileSync(join(dir, 'members'), '64')
    assert.equal(layout.bits(), gridGroupBits(5, 64, 4))
    assert.equal(layout.bits()?.length, 4, 'a swarm four times larger has four times the keys')
    writeFileSync(join(dir, 'members'), '7')
    assert.equal(layout.bits(), '', 'a swarm smaller than two groups has one key')
    writeFileSync(join(dir, 'members'), '4')
    assert.equal(layout.bits(), undefined, 'rank 5 is not a member of a swarm of 4')
  } finally { rmSync(dir, { recursive: true, force: true }) }
})

test('an agent the membership cannot place says why once, and again only when the reason changes', () => {
  const dir = membersDir()
  try {
    const warnings: string[] = []
    const layout = new GridLayout(dir, 's-agent-4', 4, line => { warnings.push(line) })
    assert.equal(layout.bits(), undefined)
    assert.equal(layout.bits(), undefined)
    assert.equal(warnings.length, 1, warnings.join('\n'))
    assert.match(warnings[0], /membership \(files members and bootstrap in .*\) is missing or malformed: this agent stays off the Moshpit grid/)
    writeFileSync(join(dir, 'members'), '4')
    writeFileSync(join(dir, 'bootstrap'), '1')
    assert.equal(layout.bits(), undefined)
    assert.match(warnings[1], /pod s-agent-4 has no rank among the swarm's 4 members/)
    writeFileSync(join(dir, 'members'), '16')
    assert.equal(layout.bits(), gridGroupBits(5, 16, 4))
    writeFileSync(join(dir, 'members'), 'x')
    assert.equal(layout.bits(), undefined)
    assert.equal(warnings.length, 3, 'losing the membership after a placement is said again')
  } finally { rmSync(dir, { recursive: true, force: true }) }
})

test('bitsFromKey: a leader\'s grid key of our prefix and width gives the bits; anything else keeps ours', () => {
  assert.equal(bitsFromKey('avs.0b1011', 'avs', '0001'), '1011')
  assert.equal(bitsFromKey(undefined, 'avs', '0001'), '0001')
  assert.equal(bitsFromKey('avs.0b101', 'avs', '0001'), '0001', 'another width')
  assert.equal(bitsFromKey('other.0b1011', 'avs', '0001'), '0001', 'another swarm')
  assert.equal(bitsFromKey('avs.0b10x1', 'avs', '0001'), '0001', 'not bits')
  assert.equal(bitsFromKey('avs.s1f2e.0b1011', 'avs', '0001'), '0001', 'a subset round\'s key is not the full round\'s')
  assert.equal(bitsFromKey('avs.s1f2e.0b1011', 'avs.s1f2e', '0001'), '1011')
  assert.equal(bitsFromKey('avs.0b', 'avs', ''), '')
})
