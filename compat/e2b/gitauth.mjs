// The e2b SDK's Git helper with credentials, through the published
// @e2b/code-interpreter SDK (its e2b 2.51) on the code-interpreter template
// (it has git). gitauth_test.go serves GIT_URL (git http-backend behind HTTP
// Basic authentication of GIT_USER / GIT_PASSWORD) at GIT_ADDR, the one
// address the sandbox's egress policy allows, and checks after the run the
// commits pushed there.
import { Sandbox, ALL_TRAFFIC, GitAuthError } from '@e2b/code-interpreter'
import { assert, eq, rejects, run } from './lib.mjs'

const addr = process.env.GIT_ADDR
const url = process.env.GIT_URL
const username = process.env.GIT_USER
const password = process.env.GIT_PASSWORD
assert(addr && url && username && password, 'GIT_ADDR, GIT_URL, GIT_USER and GIT_PASSWORD are set')

const sbx = await Sandbox.create({ timeoutMs: 600_000, network: { allowOut: [addr], denyOut: [ALL_TRAFFIC] } })
const g = sbx.git

// holding lists the files under the sandbox's home and /tmp, and its
// processes' environments, that hold the password. The pattern matches the
// password without containing it, so grep's own command line does not.
async function holding() {
  const pattern = password.slice(0, -1) + '[' + password.slice(-1) + ']'
  const r = await sbx.commands.run(`grep -rl '${pattern}' /home/user /root /tmp /etc /proc/[0-9]*/environ 2>/dev/null; true`, { user: 'root' })
  return r.stdout.trim().split('\n').filter(Boolean)
}

await run('gitauth', [
  ['a wrong password: GitAuthError, and nothing cloned', async () => {
    const e = await rejects(() => g.clone(url, { path: '/home/user/wrong', username, password: password + '-wrong' }), GitAuthError, 'clone with a wrong password')
    eq(e.message, 'Git clone requires credentials for private repositories.', "GitAuthError's message")
    eq((await sbx.commands.run('test -e /home/user/wrong && echo there || echo absent')).stdout, 'absent\n', 'the wrong clone')
  }],
  ['no credentials: GitAuthError', async () => {
    await rejects(() => g.clone(url, { path: '/home/user/anon' }), GitAuthError, 'clone without credentials')
  }],
  ['clone with username/password keeps them out of the clone', async () => {
    await g.clone(url, { path: '/home/user/repo', branch: 'main', username, password })
    eq((await sbx.commands.run('git -C /home/user/repo log --format=%s')).stdout, 'seed\n', 'the cloned history')
    eq(await g.remoteGet('/home/user/repo', 'origin'), url, 'origin after the clone (credentials stripped)')
    eq(JSON.stringify(await holding()), '[]', 'files holding the password after the clone')
  }],
  ['commit, push with username/password: the server has it, the sandbox not the password', async () => {
    await g.configureUser('Space CI', 'ci@space.invalid')
    await sbx.files.write('/home/user/repo/a.txt', 'one\n')
    await g.add('/home/user/repo', { all: true })
    await g.commit('/home/user/repo', 'with credentials')
    await g.push('/home/user/repo', { remote: 'origin', branch: 'main', username, password })
    eq(await g.remoteGet('/home/user/repo', 'origin'), url, 'origin after the push (credentials restored away)')
    eq(JSON.stringify(await holding()), '[]', 'files holding the password after the push')
    await g.pull('/home/user/repo', { remote: 'origin', branch: 'main', username, password })
  }],
  ['push without credentials is refused by the server', async () => {
    await sbx.files.write('/home/user/repo/b.txt', 'two\n')
    await g.add('/home/user/repo', { all: true })
    await g.commit('/home/user/repo', 'stored credential')
    await rejects(() => g.push('/home/user/repo', { remote: 'origin', branch: 'main' }), GitAuthError, 'push without credentials')
  }],
  ['dangerouslyAuthenticate stores the password in ~/.git-credentials, as E2B does', async () => {
    await g.dangerouslyAuthenticate({ username, password, host: addr, protocol: 'http' })
    eq(await g.getConfig('credential.helper'), 'store', 'credential.helper')
    eq(JSON.stringify(await holding()), JSON.stringify(['/home/user/.git-credentials']), 'files holding the password')
    await g.push('/home/user/repo', { remote: 'origin', branch: 'main' })
    await g.clone(url, { path: '/home/user/again', branch: 'main' })
    eq((await sbx.commands.run('git -C /home/user/again log --format=%s')).stdout, 'stored credential\nwith credentials\nseed\n', 'a clone with the stored credential')
  }],
], () => sbx.kill())
