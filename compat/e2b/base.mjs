// The base template as E2B's users expect it (issue 21 bug 8): `python` is
// python3, user is `user`, and sudo is passwordless root in a vm sandbox;
// in an ns sandbox, which cannot gain privileges, sudo fails saying why and
// what to do, and the advice (run as root) works.
import { Sandbox, CommandExitError } from 'e2b'
import { assert, eq, rejects, run, template } from './lib.mjs'

const runtime = process.env.SPACE_RUNTIME
const sbx = await Sandbox.create(template, { timeoutMs: 300_000 })

await run('base', [
  ['python is python3, as user', async () => {
    eq((await sbx.commands.run('python -c "print(6*7)"')).stdout.trim(), '42', 'python')
    assert((await sbx.commands.run('python --version')).stdout.startsWith('Python 3'), 'python --version')
    eq((await sbx.commands.run('whoami')).stdout.trim(), 'user', 'whoami')
  }],
  runtime === 'ns'
    ? ['sudo says why it cannot work, and root works', async () => {
        const e = await rejects(() => sbx.commands.run('sudo -n true'), CommandExitError, 'sudo in ns')
        eq(e.exitCode, 1, 'sudo exit code')
        assert(e.stderr.includes('no new privileges') && e.stderr.includes('vm runtime') && e.stderr.includes("{user: 'root'}"), `sudo stderr: ${e.stderr}`)
        eq((await sbx.commands.run('id -u', { user: 'root' })).stdout.trim(), '0', 'id -u as root')
      }]
    : ['sudo is passwordless root', async () => {
        const r = await sbx.commands.run('sudo -n id -u')
        eq(r.stdout.trim(), '0', 'sudo id -u')
        eq(r.stderr, '', 'sudo stderr')
      }],
], async () => {
  await sbx.kill()
})
