// E2B's lifecycle controls through the unmodified e2b SDK: onTimeout
// "pause" with and without autoResume, a pause without memory, connect
// with onResume "reboot", and named snapshots (docs/e2b.md).
import { Sandbox } from 'e2b'
import { assert, eq, run, template, waitFor } from './lib.mjs'

const made = []
async function create(opts, from = template) {
  const s = await Sandbox.create(from, opts)
  made.push(s)
  return s
}
// failure runs fn and returns the message it throws.
async function failure(fn, what) {
  try {
    await fn()
  } catch (e) {
    return String(e?.message)
  }
  throw new Error(what + ': did not throw')
}
const state = async (s) => (await Sandbox.getInfo(s.sandboxId)).state
// waitPaused waits for a sandbox to pause at its timeout, with no request
// to its guest meanwhile (getInfo is the REST API's, not the guest's).
const waitPaused = (s) => waitFor(async () => (await state(s)) === 'paused', `${s.sandboxId} paused at its timeout`, 90_000)
// counter starts a background loop and returns its pid.
async function counter(s) {
  const h = await s.commands.run('while true; do sleep 0.2; done', { background: true })
  return h.pid
}
const listed = async (s, pid) => (await s.commands.list()).some((p) => p.pid === pid)

await run('e2blife', [
  ['onTimeout pause with autoResume: a command wakes it, files and processes kept', async () => {
    const s = await create({ timeoutMs: 4_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
    const info = await s.getInfo()
    eq(info.lifecycle?.onTimeout, 'pause', 'lifecycle.onTimeout')
    eq(info.lifecycle?.autoResume, true, 'lifecycle.autoResume')
    await s.files.write('/home/user/kept.txt', 'across the pause')
    const pid = await counter(s)
    await waitPaused(s)
    eq((await s.commands.run('cat /home/user/kept.txt')).stdout, 'across the pause', 'a command after the pause (woken by it)')
    eq(await state(s), 'running', 'state after the command')
    assert(await listed(s, pid), 'the process started before the pause is still there')
  }],
  ['onTimeout pause without autoResume: stays paused until connect', async () => {
    const s = await create({ timeoutMs: 4_000, lifecycle: { onTimeout: 'pause' } })
    const info = await s.getInfo()
    eq(info.lifecycle?.onTimeout, 'pause', 'lifecycle.onTimeout')
    eq(info.lifecycle?.autoResume, false, 'lifecycle.autoResume')
    await s.files.write('/home/user/kept.txt', 'held')
    await waitPaused(s)
    let woke = true
    try {
      await s.commands.run('true', { requestTimeoutMs: 20_000 })
    } catch (e) {
      woke = false
    }
    eq(woke, false, 'a command on a sandbox paused without autoResume fails')
    eq(await state(s), 'paused', 'state after the refused command')
    const again = await Sandbox.connect(s.sandboxId)
    eq(await state(s), 'running', 'state after connect')
    eq(await again.files.read('/home/user/kept.txt'), 'held', 'file after connect')
  }],
  ['onTimeout pause without memory: files kept, processes not', async () => {
    const s = await create({ timeoutMs: 4_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
    eq((await s.getInfo()).lifecycle?.autoResume, false, 'lifecycle.autoResume')
    await s.files.write('/home/user/disk.txt', 'on disk')
    const pid = await counter(s)
    await waitPaused(s)
    const again = await Sandbox.connect(s.sandboxId)
    eq(await state(s), 'running', 'state after connect')
    eq(await again.files.read('/home/user/disk.txt'), 'on disk', 'file after connect')
    eq(await listed(again, pid), false, 'the process is gone (its memory was not kept)')
  }],
  ['setTimeout of a sandbox that pauses at its timeout', async () => {
    const s = await create({ timeoutMs: 60_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
    await s.setTimeout(600_000)
    const end = (await s.getInfo()).endAt.getTime()
    assert(Math.abs(end - (Date.now() + 600_000)) < 15_000, `endAt ${new Date(end).toISOString()} is about ten minutes away`)
    eq(await state(s), 'running', 'state')
  }],
  ['pause({keepMemory: false}) then connect', async () => {
    const s = await create({ timeoutMs: 300_000 })
    await s.files.write('/home/user/disk.txt', 'on disk')
    const pid = await counter(s)
    eq(await s.pause({ keepMemory: false }), true, 'pause without memory')
    eq(await s.pause({ keepMemory: false }), false, 'second pause is a no-op')
    eq(await state(s), 'paused', 'state after pause')
    const again = await Sandbox.connect(s.sandboxId, { timeoutMs: 300_000 })
    eq(await state(s), 'running', 'state after connect')
    eq(await again.files.read('/home/user/disk.txt'), 'on disk', 'file after connect')
    eq(await listed(again, pid), false, 'the process is gone')
  }],
  ['connect with onResume reboot', async () => {
    const s = await create({ timeoutMs: 300_000 })
    await s.files.write('/home/user/disk.txt', 'rebooted')
    const pid = await counter(s)
    eq(await s.pause(), true, 'pause with memory')
    eq(await s.pause({ keepMemory: false }), false, 'a pause without memory of a paused sandbox is a no-op')
    const again = await Sandbox.connect(s.sandboxId, { onResume: 'reboot' })
    eq(await state(s), 'running', 'state after connect')
    eq(await again.files.read('/home/user/disk.txt'), 'rebooted', 'file after the reboot')
    eq(await listed(again, pid), false, 'the process is gone after the reboot')
  }],
  ['named snapshots: create, list by name, a sandbox from the name', async () => {
    const s = await create({ timeoutMs: 300_000 })
    const name = 'snap-' + Date.now()
    await s.files.write('/home/user/named.txt', 'first')
    const one = await s.createSnapshot({ name })
    eq(JSON.stringify(one.names), JSON.stringify([name]), 'names of the named snapshot')
    let listed = await Sandbox.listSnapshots({ name }).nextItems()
    eq(listed.length, 1, 'snapshots listed by name')
    eq(listed[0].snapshotId, one.snapshotId, 'the named snapshot')
    eq(JSON.stringify(listed[0].names), JSON.stringify([name]), 'listed names')
    // A new snapshot under the name takes it (E2B: a new build of the
    // snapshot template).
    await s.files.write('/home/user/named.txt', 'second')
    const two = await s.createSnapshot({ name })
    assert(two.snapshotId !== one.snapshotId, 'a second snapshot')
    listed = await Sandbox.listSnapshots({ name }).nextItems()
    eq(listed.length, 1, 'snapshots listed by name after the second')
    eq(listed[0].snapshotId, two.snapshotId, 'the name moved to the second snapshot')
    const all = await Sandbox.listSnapshots({ sandboxId: s.sandboxId }).nextItems()
    eq(all.find((x) => x.snapshotId === one.snapshotId)?.names.length, 0, 'the first snapshot has no name left')
    const child = await create({ timeoutMs: 120_000, lifecycle: { onTimeout: 'pause', autoResume: true } }, name)
    eq(await child.files.read('/home/user/named.txt'), 'second', 'file in the sandbox made from the name')
    eq((await child.getInfo()).lifecycle?.onTimeout, 'pause', 'lifecycle of the sandbox made from the name')
    const clash = await failure(() => s.createSnapshot({ name: template }), 'a snapshot named as a template')
    assert(clash.includes("is a template's name"), 'a template name is refused: ' + clash)
    eq(await Sandbox.deleteSnapshot(two.snapshotId), true, 'deleteSnapshot')
    eq((await Sandbox.listSnapshots({ name }).nextItems()).length, 0, 'no snapshot holds the name after the delete')
    const gone = await failure(() => create({ timeoutMs: 60_000 }, name), 'a create from a deleted name')
    assert(gone.includes(name), 'a create from the deleted name fails naming it: ' + gone)
    eq(await Sandbox.deleteSnapshot(one.snapshotId), true, 'deleteSnapshot of the first')
  }],
], async () => {
  for (const s of made) await s.kill().catch(() => {})
})
