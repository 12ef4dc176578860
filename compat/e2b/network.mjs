// E2B's egress controls with the unmodified e2b SDK: network.allowOut /
// denyOut on create, sbx.updateNetwork live, getInfo's network, and the
// fields SPACE refuses by name. network_test.go serves NET_ALLOWED and
// NET_OTHER (HTTP on port 80, answering "upstream ADDR host HOST") where
// the sandboxes' gateway dials, and resolves NET_DOMAIN to NET_DOMAIN_ADDR.
// E2B_PACKAGE picks the SDK: e2b (the newest pinned) or e2b-2.45.
const { Sandbox, ALL_TRAFFIC } = await import(process.env.E2B_PACKAGE || 'e2b')
import { assert, eq, run, template } from './lib.mjs'

const allowed = process.env.NET_ALLOWED
const other = process.env.NET_OTHER
const domain = process.env.NET_DOMAIN
const domainAddr = process.env.NET_DOMAIN_ADDR
assert(allowed && other && domain && domainAddr, 'NET_ALLOWED, NET_OTHER, NET_DOMAIN and NET_DOMAIN_ADDR are set')

// reach sends GET / to target:80 from inside sbx (busybox nc, as the
// minimal template has no curl) with Host host, and says whether the
// upstream answered.
async function reach(sbx, target, host = target) {
  const r = await sbx.commands.run(
    String.raw`printf 'GET / HTTP/1.1\r\nHost: ` + host + String.raw`\r\nConnection: close\r\n\r\n' | nc -w 5 ` + target + ' 80',
  ).catch((e) => e)
  return (r.stdout ?? '').includes('upstream ')
}

async function expectReach(sbx, want, what) {
  for (const [target, ok] of Object.entries(want)) {
    eq(await reach(sbx, target), ok, `${what}: ${target} reachable`)
  }
}

// refused runs fn and checks that it fails naming what.
async function refused(fn, what) {
  try {
    await fn()
  } catch (e) {
    assert(String(e?.message).includes(what), `error names ${what}: ${e?.message}`)
    return
  }
  throw new Error(`${what}: not refused`)
}

const sbx = await Sandbox.create(template, {
  timeoutMs: 300_000,
  network: { denyOut: [ALL_TRAFFIC], allowOut: [allowed] },
})
const others = []

await run('network', [
  ['allowOut with denyOut ALL_TRAFFIC is an allowlist', async () => {
    await expectReach(sbx, { [allowed]: true, [other]: false }, 'allowlist')
  }],
  ['getInfo says the network', async () => {
    const info = await sbx.getInfo()
    eq(JSON.stringify(info.network?.allowOut), JSON.stringify([`${allowed}/32`]), 'network.allowOut')
    eq(JSON.stringify(info.network?.denyOut), JSON.stringify([ALL_TRAFFIC]), 'network.denyOut')
    eq(info.network?.allowPublicTraffic, true, 'network.allowPublicTraffic')
    eq(info.allowInternetAccess, false, 'allowInternetAccess')
  }],
  ['updateNetwork changes it live', async () => {
    await sbx.updateNetwork({ denyOut: [ALL_TRAFFIC], allowOut: [other] })
    await expectReach(sbx, { [allowed]: false, [other]: true }, 'after updateNetwork to the other address')
    const info = await sbx.getInfo()
    eq(JSON.stringify(info.network?.allowOut), JSON.stringify([`${other}/32`]), 'network.allowOut after the update')
  }],
  ['updateNetwork with nothing clears the rules', async () => {
    await sbx.updateNetwork({})
    await expectReach(sbx, { [allowed]: true, [other]: true }, 'after updateNetwork({})')
    const info = await sbx.getInfo()
    eq(info.network?.allowOut, undefined, 'network.allowOut once cleared')
    eq(info.network?.denyOut, undefined, 'network.denyOut once cleared')
    eq(info.allowInternetAccess, true, 'allowInternetAccess once cleared')
  }],
  ['allowOut beats denyOut', async () => {
    // The whole /24 is denied but one address in it is allowed.
    await sbx.updateNetwork({ denyOut: [allowed.replace(/\.\d+$/, '.0/24')], allowOut: [allowed] })
    await expectReach(sbx, { [allowed]: true, [other]: false }, 'deny the /24, allow one address')
  }],
  ['a domain in allowOut', async () => {
    await sbx.updateNetwork({ denyOut: [ALL_TRAFFIC], allowOut: [domain] })
    eq(await reach(sbx, domain), true, `${domain} by name`)
    eq(await reach(sbx, domainAddr, domainAddr), false, `${domainAddr} by address (no name)`)
    eq(await reach(sbx, allowed), false, `${allowed}`)
  }],
  ['allowInternetAccess false with allowOut', async () => {
    const s = await Sandbox.create(template, { timeoutMs: 120_000, allowInternetAccess: false, network: { allowOut: [allowed] } })
    others.push(s)
    await expectReach(s, { [allowed]: true, [other]: false }, 'allowInternetAccess false + allowOut')
  }],
  ['what SPACE cannot do is refused by name', async () => {
    await refused(() => Sandbox.create(template, { network: { denyOut: ['example.com'] } }), 'network.denyOut[0] "example.com": domain names are not supported in denyOut')
    await refused(() => Sandbox.create(template, { network: { allowOut: ['example.com'] } }), 'add "0.0.0.0/0" (ALL_TRAFFIC) to denyOut')
    await refused(() => Sandbox.create(template, { network: { maskRequestHost: 'a b.example.com' } }), 'network.maskRequestHost "a b.example.com"')
    await refused(() => Sandbox.create(template, { network: { allowOut: ['api.example.com'], denyOut: [ALL_TRAFFIC], rules: { 'api.example.com': [{ transform: { headers: { A: 'b' } } }] } } }), 'network.rules["api.example.com"]: header A: a value of 1 bytes, fewer than 8')
    await refused(() => sbx.updateNetwork({ rules: { 'api.example.com': [{ transform: { headers: { Host: 'example.org:443' } } }] } }), 'header Host frames or routes the request')
    await refused(() => sbx.updateNetwork({ egressProxy: { address: 'proxy.example.com:1080' } }), 'network.egressProxy is not supported by SPACE')
    await refused(() => Sandbox.create(template, { network: { egressProxy: { address: 'proxy.example.com:1080' } } }), 'network.egressProxy is not supported by SPACE')
    // Not every pinned SDK sends httpsPorts: the request as the newest sends it.
    const r = await fetch(process.env.E2B_API_URL + '/sandboxes', {
      method: 'POST', headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
      body: JSON.stringify({ templateID: template, network: { httpsPorts: [3000] } }),
    })
    const body = await r.text()
    eq(r.status, 400, 'httpsPorts: ' + body)
    assert(body.includes('network.httpsPorts is not supported by SPACE'), 'httpsPorts refusal names it: ' + body)
    await refused(() => sbx.updateNetwork({ denyOut: ['10.0.0.1/8'] }), 'has host bits set; did you mean 10.0.0.0/8')
    // A refused update leaves the policy as it was.
    eq(await reach(sbx, domain), true, `${domain} after refused updates`)
  }],
  ['updateNetwork of a paused sandbox applies when it resumes', async () => {
    const s = await Sandbox.create(template, { timeoutMs: 120_000, network: { denyOut: [ALL_TRAFFIC], allowOut: [allowed] } })
    others.push(s)
    await s.pause()
    await s.updateNetwork({ denyOut: [ALL_TRAFFIC], allowOut: [other] })
    const back = await Sandbox.connect(s.sandboxId)
    await expectReach(back, { [allowed]: false, [other]: true }, 'updated while paused')
  }],
  ['updateNetwork of a killed sandbox', async () => {
    const s = await Sandbox.create(template, { timeoutMs: 60_000 })
    await s.kill()
    let err
    try { await s.updateNetwork({}) } catch (e) { err = e }
    assert(err && err.constructor.name === 'SandboxNotFoundError', `SandboxNotFoundError, got ${err?.constructor?.name}: ${err?.message}`)
  }],
], async () => {
  await sbx.kill()
  for (const s of others) await s.kill()
})
