// The rest of the e2b SDK's public surface, with the unmodified SDK: the
// methods no other script calls (pty.connect, files.writeFiles, a command
// handle's disconnect, getFullInfo, betaPause, the static forms of
// updateNetwork and createSnapshot, the MCP accessors, the E2B client
// class) and the refusals of what SPACE lacks (volumes, secrets), each with
// the message the SDK raises. docs/e2b.md's "Every method" table names
// this script for each of them.
import { E2B, FileNotFoundError, Sandbox, SandboxError, Secret, Volume } from 'e2b'
import { assert, eq, rejects, run, template, waitFor } from './lib.mjs'

const sbx = await Sandbox.create(template, { timeoutMs: 300_000 })

// refusedWith runs fn and checks that the SDK raises the server's 400,
// naming what.
async function refusedWith(fn, what) {
  let err
  try { await fn() } catch (e) { err = e }
  assert(err, `${what}: not refused`)
  assert(String(err.message).includes(what), `${what}: the error does not name it: ${err.constructor?.name}: ${err.message}`)
  return err
}

await run('surface', [
  ['pty.connect to a running PTY', async () => {
    const out = []
    const h = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} })
    await h.disconnect()
    const again = await sbx.pty.connect(h.pid, { onData: (d) => out.push(Buffer.from(d).toString()) })
    await sbx.pty.sendInput(h.pid, new TextEncoder().encode('echo re-attached-$((6*7))\n'))
    await waitFor(() => out.join('').includes('re-attached-42'), 'the reconnected PTY output')
    eq(await sbx.pty.kill(h.pid), true, 'pty kill')
    await again.wait().catch(() => {})
  }],
  ['a command handle disconnects and the process keeps running', async () => {
    const h = await sbx.commands.run('sleep 1; echo done > /tmp/disconnected', { background: true })
    await h.disconnect()
    await waitFor(async () => (await sbx.files.exists('/tmp/disconnected')), 'the disconnected command finishing')
    eq((await sbx.files.read('/tmp/disconnected')).trim(), 'done', 'its output')
    eq(sbx.commands.supportsStdinClose, true, 'supportsStdinClose (the envd version SPACE reports)')
  }],
  ['files.writeFiles writes several files', async () => {
    const infos = await sbx.files.writeFiles([
      { path: '/tmp/wf/a.txt', data: 'alpha' },
      { path: '/tmp/wf/b.bin', data: new Uint8Array([1, 2, 3]).buffer },
    ])
    eq(infos.length, 2, 'write infos')
    eq(await sbx.files.read('/tmp/wf/a.txt'), 'alpha', 'a.txt')
    eq((await sbx.files.read('/tmp/wf/b.bin', { format: 'bytes' })).length, 3, 'b.bin')
  }],
  ['getFullInfo, and the static updateNetwork and createSnapshot', async () => {
    const full = await Sandbox.getFullInfo(sbx.sandboxId)
    eq(full.sandboxId, sbx.sandboxId, 'getFullInfo')
    await Sandbox.updateNetwork(sbx.sandboxId, { allowOut: ['1.1.1.1'], denyOut: ['0.0.0.0/0'] })
    const net = (await sbx.getInfo()).network
    assert(net?.allowOut?.includes('1.1.1.1/32'), `static updateNetwork: ${JSON.stringify(net)}`)
    await Sandbox.updateNetwork(sbx.sandboxId, {})
    const snap = await Sandbox.createSnapshot(sbx.sandboxId)
    assert(snap.snapshotId, 'static createSnapshot')
    eq(await Sandbox.deleteSnapshot(snap.snapshotId), true, 'deleteSnapshot')
  }],
  ['betaPause then connect', async () => {
    eq(await sbx.betaPause(), true, 'betaPause')
    eq((await sbx.getInfo()).state, 'paused', 'state after betaPause')
    await Sandbox.connect(sbx.sandboxId)
    eq((await sbx.getInfo()).state, 'running', 'state after connect')
  }],
  ['MCP: getMcpUrl is a URL, getMcpToken finds no gateway (mcp is refused at create)', async () => {
    assert(sbx.getMcpUrl().endsWith(`-${sbx.sandboxId}.localhost/mcp`), `getMcpUrl: ${sbx.getMcpUrl()}`)
    await rejects(() => sbx.getMcpToken(), FileNotFoundError, 'getMcpToken')
    await refusedWith(() => Sandbox.create(template, { mcp: { github: {} } }), 'mcp')
  }],
  ['the E2B client class', async () => {
    const client = new E2B()
    const other = await client.Sandbox.create(template, { timeoutMs: 60_000 })
    eq((await other.commands.run('echo client')).stdout, 'client\n', 'a sandbox of the client')
    await other.kill()
  }],
  ['volumes and secrets are refused with 400 naming them', async () => {
    const v = await refusedWith(() => Volume.create('space-compat-vol'), 'volumes')
    assert(v instanceof Error, 'a Volume error')
    await refusedWith(() => Volume.list(), 'volumes')
    await refusedWith(() => Secret.create('space-compat-secret', 'value-0123456789'), 'secrets')
    await refusedWith(() => Secret.list().nextItems(), 'secrets')
    // Secret.fill's placeholder in a rule is refused, not sent as text.
    await refusedWith(() => sbx.updateNetwork({ rules: { 'api.example.com': [{ transform: { headers: { Authorization: `Bearer ${Secret.fill('openai')}` } } }] } }), 'Secret.fill')
  }],
], async () => { await sbx.kill() })
