// Busy and quota answers as E2B gives them (internal/e2bapi/busy.go): a
// tenant over its quota gets 429 with Retry-After, which the SDK retries
// and then raises as RateLimitError; a slot freed meanwhile lets the
// retried create pass.
import { Sandbox, RateLimitError } from 'e2b'
import { assert, eq, rejects, run, template, waitFor } from './lib.mjs'

// E2B_SANDBOX_URL is SPACE's own API URL (the same listener).
const api = process.env.E2B_SANDBOX_URL
const admin = { Authorization: `Bearer ${process.env.SPACE_KEY}`, 'Content-Type': 'application/json' }

async function spaceAPI(method, path, body) {
  const res = await fetch(api + path, { method, headers: admin, body: body && JSON.stringify(body) })
  const text = await res.text()
  if (!res.ok) throw new Error(`${method} ${path}: HTTP ${res.status}: ${text}`)
  return text ? JSON.parse(text) : undefined
}

// refusedCreates is how many E2B creates the server has answered 429.
async function refusedCreates() {
  const res = await fetch(api + '/metrics', { headers: admin })
  const text = await res.text()
  const m = text.match(/^space_http_requests_total\{route="POST \/e2b\/v2\/sandboxes",code="429"\} (\d+)$/m)
  return m ? Number(m[1]) : 0
}

// A tenant of its own whose quota is one running sandbox.
const tenant = await spaceAPI('POST', '/v1/tenants', { name: 'busy-' + Date.now() })
await spaceAPI('PUT', `/v1/tenants/${tenant.tenant.id}/quota`, { max_sandboxes: 1 })
const apiKey = tenant.key
const made = []

await run('busy', [
  ['over the quota is RateLimitError with SPACE\'s message', async () => {
    const a = await Sandbox.create(template, { apiKey, timeoutMs: 120_000 })
    made.push(a)
    const before = await refusedCreates()
    const e = await rejects(() => Sandbox.create(template, { apiKey, timeoutMs: 120_000 }), RateLimitError, 'second create over a quota of 1')
    assert(e.message.startsWith('Rate limit exceeded, please try again later - '), `message ${e.message}`)
    assert(e.message.includes('at most 1 running sandboxes'), `message names the quota: ${e.message}`)
    // The SDK sent it 4 times (3 retries, as Retry-After asks) before
    // raising.
    eq(await refusedCreates() - before, 4, '429 answers to the refused create')
    await a.kill()
  }],
  ['a create retried after Retry-After passes once a slot frees', async () => {
    const a = await Sandbox.create(template, { apiKey, timeoutMs: 120_000 })
    made.push(a)
    const before = await refusedCreates()
    const second = Sandbox.create(template, { apiKey, timeoutMs: 120_000 })
    second.catch(() => {}) // awaited below
    await waitFor(async () => (await refusedCreates()) > before, 'the second create to be refused once', 10_000)
    await a.kill()
    const b = await second
    made.push(b)
    assert(await b.isRunning(), 'the retried create runs')
  }],
], async () => {
  for (const s of made) await s.kill().catch(() => {})
})
