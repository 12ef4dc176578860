// The sandbox lifecycle through the unmodified e2b SDK: list, info,
// timeout, pause and connect, snapshots, fork, kill.
import { Sandbox, SandboxNotFoundError } from 'e2b'
import { assert, eq, rejects, run, template, waitFor } from './lib.mjs'

const tag = 'compat-' + Date.now()
const sbx = await Sandbox.create(template, { timeoutMs: 300_000, metadata: { suite: tag } })
const others = []

// counter starts a background loop that writes an increasing number to a
// file, and returns its pid.
async function counter(s) {
  const h = await s.commands.run('i=0; while true; do i=$((i+1)); echo $i > /tmp/n.tmp; mv /tmp/n.tmp /tmp/n; sleep 0.2; done', { background: true })
  return h.pid
}
const readN = async (s) => Number((await s.files.read('/tmp/n')).trim())

await run('lifecycle', [
  ['list with metadata filter', async () => {
    const items = await Sandbox.list({ query: { metadata: { suite: tag } } }).nextItems()
    eq(items.length, 1, 'listed sandboxes')
    eq(items[0].sandboxId, sbx.sandboxId, 'listed id')
    eq(items[0].state, 'running', 'listed state')
    eq(items[0].metadata.suite, tag, 'listed metadata')
  }],
  ['list pagination', async () => {
    const extra = await Sandbox.create(template, { timeoutMs: 120_000, metadata: { suite: tag } })
    others.push(extra)
    const p = Sandbox.list({ query: { metadata: { suite: tag } }, limit: 1 })
    const first = await p.nextItems()
    eq(first.length, 1, 'first page')
    assert(p.hasNext, 'has a second page')
    const second = await p.nextItems()
    eq(second.length, 1, 'second page')
    assert(first[0].sandboxId !== second[0].sandboxId, 'pages differ')
    eq(first[0].sandboxId, extra.sandboxId, 'newest first (E2B\'s default order)')
    eq(second[0].sandboxId, sbx.sandboxId, 'oldest last')
    eq(p.hasNext, false, 'no third page')
  }],
  ['getInfo and isRunning', async () => {
    const info = await sbx.getInfo()
    eq(info.sandboxId, sbx.sandboxId, 'id')
    eq(info.templateId, template, 'template')
    eq(info.state, 'running', 'state')
    eq(info.metadata.suite, tag, 'metadata')
    eq(await sbx.isRunning(), true, 'isRunning')
  }],
  ['getMetrics', async () => {
    const ms = await sbx.getMetrics()
    assert(ms.length >= 1, `${ms.length} samples, want the history and one taken now`)
    const m = ms[ms.length - 1]
    assert(m.cpuCount >= 1, `cpuCount ${m.cpuCount}`)
    assert(m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, `cpuUsedPct ${m.cpuUsedPct}`)
    assert(m.memUsed > 0 && m.memUsed <= m.memTotal, `memUsed ${m.memUsed} of ${m.memTotal}`)
    assert(Math.abs(m.timestamp.getTime() - Date.now()) < 60_000, `timestamp ${m.timestamp}`)
  }],
  ['setTimeout', async () => {
    await sbx.setTimeout(120_000)
    const end = (await sbx.getInfo()).endAt.getTime()
    assert(Math.abs(end - (Date.now() + 120_000)) < 15_000, `endAt ${new Date(end).toISOString()} is about two minutes away`)
    await sbx.setTimeout(300_000)
  }],
  ['pause then connect keeps files and processes', async () => {
    await sbx.files.write('/home/user/kept.txt', 'still here')
    const pid = await counter(sbx)
    await waitFor(async () => (await sbx.files.exists('/tmp/n')), 'counter file')
    eq(await sbx.pause(), true, 'pause')
    eq(await Sandbox.pause(sbx.sandboxId), false, 'second pause is a no-op')
    eq((await sbx.getInfo()).state, 'paused', 'state after pause')
    eq(await sbx.isRunning(), false, 'isRunning while paused')
    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300_000 })
    eq((await again.getInfo()).state, 'running', 'state after connect')
    eq(await again.files.read('/home/user/kept.txt'), 'still here', 'file after resume')
    assert((await again.commands.list()).some((p) => p.pid === pid), 'counter process still listed')
    const before = await readN(again)
    await waitFor(async () => (await readN(again)) > before, 'counter advancing after resume')
    await again.commands.kill(pid)
  }],
  ['snapshot and create from it', async () => {
    await sbx.files.write('/home/user/snap.txt', 'in the snapshot')
    const snap = await sbx.createSnapshot()
    assert(snap.snapshotId, 'snapshot id')
    const listed = await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems()
    assert(listed.some((s) => s.snapshotId === snap.snapshotId), 'snapshot listed')
    const child = await Sandbox.create(snap.snapshotId, { timeoutMs: 120_000 })
    others.push(child)
    eq(await child.files.read('/home/user/snap.txt'), 'in the snapshot', 'file in the sandbox made from the snapshot')
    await child.kill()
    eq(await Sandbox.deleteSnapshot(snap.snapshotId), true, 'deleteSnapshot')
    eq(await Sandbox.deleteSnapshot(snap.snapshotId), false, 'deleteSnapshot again')
  }],
  ['fork', async () => {
    await sbx.files.write('/home/user/fork.txt', 'from the parent')
    const forks = await sbx.fork({ count: 2, timeoutMs: 120_000 })
    eq(forks.length, 2, 'fork results')
    const ids = new Set()
    for (const f of forks) {
      assert(f instanceof Sandbox, 'fork failed: ' + f)
      others.push(f)
      ids.add(f.sandboxId)
      eq(await f.files.read('/home/user/fork.txt'), 'from the parent', 'file in the fork')
      eq((await f.commands.run('echo forked')).stdout, 'forked\n', 'command in the fork')
    }
    eq(ids.size, 2, 'distinct fork ids')
    eq((await sbx.getInfo()).state, 'running', 'parent still running')
  }],
  ['kill', async () => {
    const victim = await Sandbox.create(template, { timeoutMs: 60_000 })
    eq(await victim.kill(), true, 'kill')
    eq(await Sandbox.kill(victim.sandboxId), false, 'kill again')
    await rejects(() => Sandbox.getInfo(victim.sandboxId), SandboxNotFoundError, 'getInfo after kill')
    eq(await victim.isRunning(), false, 'isRunning after kill')
  }],
], async () => {
  for (const o of others) await o.kill().catch(() => {})
  await sbx.kill()
})
