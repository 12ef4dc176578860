// API keys in E2B's shape, with the e2b SDK 2.45 (pinned as e2b-2.45 in
// package-lock.json), which refuses any key not shaped e2b_<hex> unless
// E2B_VALIDATE_API_KEY=false: a key from `space key create --e2b` works
// with no such variable, in 2.45 and in the newest SDK alike.
import { Sandbox, AuthenticationError } from 'e2b-2.45'
import { Sandbox as SandboxNewest } from 'e2b'
import { assert, eq, rejects, run, template } from './lib.mjs'

const key = process.env.E2B_API_KEY
assert(/^e2b_[0-9a-f]{40}$/.test(key), `E2B_API_KEY ${key?.slice(0, 12)}… is not e2b_ and 40 hex`)
eq(process.env.E2B_VALIDATE_API_KEY, undefined, 'E2B_VALIDATE_API_KEY')
const sbx = await Sandbox.create(template, { timeoutMs: 120_000 })

await run('keys', [
  ['SDK 2.45 with an E2B-shaped key', async () => {
    const r = await sbx.commands.run('echo shaped')
    eq(r.stdout.trim(), 'shaped', 'command output')
    const listed = await Sandbox.list().nextItems()
    assert(listed.some((s) => s.sandboxId === sbx.sandboxId), 'the sandbox is listed')
  }],
  ['SDK 2.45 refuses a space_ key by its shape', async () => {
    await rejects(() => Sandbox.list({ apiKey: process.env.SPACE_KEY }).nextItems(), AuthenticationError, 'a space_ key in 2.45')
  }],
  ['the newest SDK with the same key', async () => {
    const info = await SandboxNewest.getInfo(sbx.sandboxId)
    eq(info.sandboxId, sbx.sandboxId, 'getInfo')
  }],
  ['a wrong secret is AuthenticationError', async () => {
    const last = key.at(-1)
    const wrong = key.slice(0, -1) + (last === '0' ? '1' : '0')
    await rejects(() => Sandbox.list({ apiKey: wrong }).nextItems(), AuthenticationError, 'one secret digit changed')
  }],
], () => sbx.kill())
