// Sandbox ports through the E2B data plane, with the unmodified e2b SDK:
// every HTTP port of a sandbox is public by default, as on E2B, and behind
// the trafficAccessToken with network.allowPublicTraffic false.
import http from 'node:http'
import { Sandbox } from 'e2b'
import { assert, eq, run, template, waitFor } from './lib.mjs'

const port = 8000
const dataPlane = new URL(process.env.E2B_SANDBOX_URL)
const trafficHeader = 'e2b-traffic-access-token'

// get sends GET / to the data plane with the given headers (Host among
// them, which fetch does not let a caller set) and returns status and body.
function get(headers, path = '/') {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: dataPlane.hostname, port: dataPlane.port, path, headers }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (d) => { body += d })
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.setTimeout(30_000, () => req.destroy(new Error('no answer in 30 s')))
    req.end()
  })
}

// byHeader routes to port of sbx with E2B's headers, as E2B's docs advise
// without wildcard DNS.
const byHeader = (sbx, extra = {}) => get({ 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(port), ...extra })

// byHost routes by the host name sbx.getHost gives. getHost assumes HTTPS on
// 443, so the request goes to the data plane's address with that Host.
const byHost = (sbx, extra = {}) => get({ Host: sbx.getHost(port), ...extra })

// serve starts an HTTP server on port in sbx (busybox httpd: the minimal
// template has no Python) and waits until it answers inside the sandbox.
async function serve(sbx, text) {
  await sbx.files.write('/tmp/www/index.html', text)
  await sbx.commands.run(`busybox httpd -f -p ${port} -h /tmp/www`, { background: true })
  await waitFor(async () => {
    const r = await sbx.commands.run(`busybox wget -q -O - http://127.0.0.1:${port}/`).catch(() => null)
    return r?.stdout === text
  }, 'httpd answering in the sandbox', 30_000)
}

const pub = await Sandbox.create(template, { timeoutMs: 300_000 })
const priv = await Sandbox.create(template, { timeoutMs: 300_000, secure: true, network: { allowPublicTraffic: false } })
const others = []
const textOf = (sbx) => `hello from ${sbx.sandboxId}\n`

await run('ports', [
  ['maskRequestHost: the port sees that Host', async () => {
    const s = await Sandbox.create(template, { timeoutMs: 120_000, network: { maskRequestHost: '${PORT}-masked.example.com' } })
    others.push(s)
    eq((await s.getInfo()).network?.maskRequestHost, '${PORT}-masked.example.com', 'getInfo().network.maskRequestHost')
    // A CGI script of busybox httpd answers the Host it was sent.
    await s.files.write('/tmp/www/cgi-bin/host', '#!/bin/sh\necho "Content-Type: text/plain"\necho\necho "host=$HTTP_HOST"\n')
    await s.commands.run(`chmod +x /tmp/www/cgi-bin/host && busybox httpd -f -p ${port} -h /tmp/www`, { background: true })
    await waitFor(async () => {
      const r = await s.commands.run(`busybox wget -q -O - http://127.0.0.1:${port}/cgi-bin/host`).catch(() => null)
      return r?.stdout?.startsWith('host=')
    }, 'httpd answering in the sandbox', 30_000)
    for (const [what, headers] of [['by header', { 'E2b-Sandbox-Id': s.sandboxId, 'E2b-Sandbox-Port': String(port) }], ['by host', { Host: s.getHost(port) }]]) {
      const r = await get(headers, '/cgi-bin/host')
      eq(r.status, 200, `${what}: ${r.body}`)
      eq(r.body.trim(), `host=${port}-masked.example.com`, `${what}: the Host the port saw`)
    }
    eq((await pub.getInfo()).network?.maskRequestHost, undefined, 'getInfo().network.maskRequestHost of a sandbox without one')
  }],
  ['public by default', async () => {
    eq(pub.trafficAccessToken, undefined, 'trafficAccessToken of a public sandbox')
    await serve(pub, textOf(pub))
    let r = await byHeader(pub)
    eq(r.status, 200, 'status by E2b-Sandbox-Id/E2b-Sandbox-Port: ' + r.body)
    eq(r.body, textOf(pub), 'body by header routing')
    eq(pub.getHost(port), `${port}-${pub.sandboxId}.localhost`, 'getHost')
    r = await byHost(pub)
    eq(r.status, 200, 'status by host name: ' + r.body)
    eq(r.body, textOf(pub), 'body by host name')
  }],
  ['a port nothing listens on', async () => {
    const r = await get({ 'E2b-Sandbox-Id': pub.sandboxId, 'E2b-Sandbox-Port': '8001' })
    eq(r.status, 503, 'status (SPACE cannot connect to the port): ' + r.body)
  }],
  ['private: allowPublicTraffic false', async () => {
    assert(typeof priv.trafficAccessToken === 'string' && priv.trafficAccessToken.length >= 32, 'trafficAccessToken ' + priv.trafficAccessToken)
    await serve(priv, textOf(priv))
    for (const [what, send] of [['by header', byHeader], ['by host', byHost]]) {
      let r = await send(priv)
      eq(r.status, 403, `${what} without the token: ${r.body}`)
      const e = JSON.parse(r.body)
      eq(e.code, 403, 'code in the body')
      eq(e.sandboxId, priv.sandboxId, 'sandboxId in the body')
      r = await send(priv, { [trafficHeader]: 'f'.repeat(64) })
      eq(r.status, 403, `${what} with a wrong token: ${r.body}`)
      r = await send(priv, { [trafficHeader]: priv.trafficAccessToken })
      eq(r.status, 200, `${what} with the token: ${r.body}`)
      eq(r.body, textOf(priv), `${what}: body`)
    }
    // The token opens its own sandbox only.
    const r = await byHeader(pub, { [trafficHeader]: priv.trafficAccessToken })
    eq(r.status, 403, 'another sandbox\'s token: ' + r.body)
  }],
  ['connect answers the same token', async () => {
    const again = await Sandbox.connect(priv.sandboxId, { timeoutMs: 300_000 })
    eq(again.trafficAccessToken, priv.trafficAccessToken, 'trafficAccessToken after connect')
    eq((await priv.getInfo()).network?.allowPublicTraffic, false, 'getInfo().network.allowPublicTraffic')
    eq((await pub.getInfo()).network?.allowPublicTraffic, true, 'getInfo().network.allowPublicTraffic of a public sandbox')
    const pubAgain = await Sandbox.connect(pub.sandboxId, { timeoutMs: 300_000 })
    eq(pubAgain.trafficAccessToken, undefined, 'trafficAccessToken of a public sandbox after connect')
  }],
  ['a fork is reached as its parent is', async () => {
    const [child] = await priv.fork({ timeoutMs: 120_000 })
    assert(child instanceof Sandbox, 'fork failed: ' + child)
    others.push(child)
    assert(child.trafficAccessToken && child.trafficAccessToken !== priv.trafficAccessToken, 'the fork has a token of its own')
    eq((await byHeader(child)).status, 403, 'the fork without a token')
    eq((await byHeader(child, { [trafficHeader]: priv.trafficAccessToken })).status, 403, 'the fork with its parent\'s token')
    // A microVM fork keeps the parent's processes; a namespace fork starts
    // cold from the parent's disk.
    if ((await byHeader(child, { [trafficHeader]: child.trafficAccessToken })).status !== 200) await serve(child, textOf(priv))
    const r = await byHeader(child, { [trafficHeader]: child.trafficAccessToken })
    eq(r.status, 200, 'the fork with its token: ' + r.body)
    eq(r.body, textOf(priv), 'the fork serves the parent\'s page')
  }],
  ['a sandbox from a snapshot gets what its create asks for', async () => {
    const snap = await priv.createSnapshot()
    const child = await Sandbox.create(snap.snapshotId, { timeoutMs: 120_000 })
    others.push(child)
    eq(child.trafficAccessToken, undefined, 'trafficAccessToken of a public sandbox made from a private one\'s snapshot')
    await serve(child, textOf(child))
    const r = await byHeader(child)
    eq(r.status, 200, 'without a token: ' + r.body)
    eq(r.body, textOf(child), 'body')
    await child.kill()
    await Sandbox.deleteSnapshot(snap.snapshotId)
    // A killed sandbox's port answers as E2B's proxy does.
    const gone = await byHeader(child)
    eq(gone.status, 502, 'a port of a killed sandbox: ' + gone.body)
    const e = JSON.parse(gone.body)
    eq(e.message, 'The sandbox was not found', 'message')
    eq(e.sandboxId, child.sandboxId, 'sandboxId')
    eq(e.code, 502, 'code')
  }],
], async () => {
  for (const o of others) await o.kill().catch(() => {})
  await pub.kill()
  await priv.kill()
})
