// commands.run and PTY through the unmodified e2b SDK.
import { Sandbox, CommandExitError } from 'e2b'
import { assert, eq, rejects, run, template, waitFor } from './lib.mjs'

const sbx = await Sandbox.create(template, { timeoutMs: 300_000, envs: { GLOBAL_VAR: 'from-create' } })

await run('commands', [
  ['stdout and stderr', async () => {
    const r = await sbx.commands.run('echo out; echo err >&2')
    eq(r.exitCode, 0, 'exit code')
    eq(r.stdout, 'out\n', 'stdout')
    eq(r.stderr, 'err\n', 'stderr')
  }],
  ['exit code is CommandExitError', async () => {
    const e = await rejects(() => sbx.commands.run('echo bad >&2; exit 3'), CommandExitError, 'run exit 3')
    eq(e.exitCode, 3, 'exit code')
    eq(e.stderr, 'bad\n', 'stderr')
  }],
  ['env per command and from create', async () => {
    const r = await sbx.commands.run('echo "$FOO $GLOBAL_VAR"', { envs: { FOO: 'bar' } })
    eq(r.stdout, 'bar from-create\n', 'stdout')
  }],
  ['cwd and user', async () => {
    eq((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n', 'pwd')
    eq((await sbx.commands.run('id -u', { user: 'root' })).stdout, '0\n', 'root uid')
    eq((await sbx.commands.run('id -un', { user: 'user' })).stdout, 'user\n', 'user name')
  }],
  ['streamed output callbacks', async () => {
    const lines = []
    await sbx.commands.run('for i in 1 2 3; do echo $i; sleep 0.1; done', { onStdout: (d) => lines.push(d) })
    eq(lines.join(''), '1\n2\n3\n', 'streamed stdout')
  }],
  ['background, list and kill', async () => {
    const h = await sbx.commands.run('sleep 600', { background: true })
    assert(h.pid > 0, 'pid')
    const procs = await sbx.commands.list()
    assert(procs.some((p) => p.pid === h.pid), 'process listed')
    eq(await sbx.commands.kill(h.pid), true, 'kill')
    const e = await rejects(() => h.wait(), CommandExitError, 'wait after kill')
    assert(e.exitCode !== 0, 'killed process exit code is not 0')
    await waitFor(async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid), 'process gone')
  }],
  ['stdin', async () => {
    const h = await sbx.commands.run('read line; echo "got $line"', { background: true, stdin: true })
    await sbx.commands.sendStdin(h.pid, 'hello\n')
    const r = await h.wait()
    eq(r.stdout, 'got hello\n', 'stdout')
  }],
  ['stdin closed', async () => {
    const h = await sbx.commands.run('cat', { background: true, stdin: true })
    await sbx.commands.sendStdin(h.pid, 'a\nb\n')
    await sbx.commands.closeStdin(h.pid)
    const r = await h.wait()
    eq(r.stdout, 'a\nb\n', 'cat output')
  }],
  ['connect to a running process', async () => {
    const h = await sbx.commands.run('sleep 1; echo done', { background: true })
    const again = await sbx.commands.connect(h.pid)
    const r = await again.wait()
    eq(r.stdout.includes('done'), true, 'reconnected output')
  }],
  ['pty', async () => {
    let out = ''
    const dec = new TextDecoder()
    const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d) } })
    await sbx.pty.resize(h.pid, { cols: 100, rows: 30 })
    await sbx.pty.sendInput(h.pid, new TextEncoder().encode('stty size; echo pty-$((40+2))\n'))
    await waitFor(() => out.includes('pty-42'), 'pty output')
    await waitFor(() => out.includes('30 100'), 'pty size after resize')
    eq(await sbx.pty.kill(h.pid), true, 'pty kill')
  }],
], () => sbx.kill())
