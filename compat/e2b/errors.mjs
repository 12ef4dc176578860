// Errors the SDK maps: 404 to NotFoundError, 401 to AuthenticationError,
// the data plane's 502 for a dead sandbox.
import { Sandbox, AuthenticationError, NotFoundError, SandboxNotFoundError, SandboxError } from 'e2b'
import { eq, rejects, run, template } from './lib.mjs'

const unknown = 'aaaaaaaaaaaaaaaaaaaa'
const badKey = 'space_k-aaaaaaaaaaaaaaaa_' + '0'.repeat(64)

await run('errors', [
  ['unknown sandbox is NotFoundError', async () => {
    await rejects(() => Sandbox.connect(unknown), NotFoundError, 'connect unknown')
    await rejects(() => Sandbox.getInfo(unknown), SandboxNotFoundError, 'getInfo unknown')
    await rejects(() => Sandbox.setTimeout(unknown, 10_000), SandboxNotFoundError, 'setTimeout unknown')
    eq(await Sandbox.kill(unknown), false, 'kill unknown')
  }],
  ['bad API key is AuthenticationError', async () => {
    await rejects(() => Sandbox.create(template, { apiKey: badKey }), AuthenticationError, 'create with a bad key')
    await rejects(() => Sandbox.list({ apiKey: badKey }).nextItems(), AuthenticationError, 'list with a bad key')
  }],
  ['unknown template is an error', async () => {
    await rejects(() => Sandbox.create('no-such-template'), SandboxError, 'create from an unknown template')
  }],
  ['commands on a killed sandbox fail', async () => {
    const sbx = await Sandbox.create(template, { timeoutMs: 60_000 })
    await sbx.kill()
    await rejects(() => sbx.commands.run('true'), SandboxError, 'run after kill')
  }],
])
