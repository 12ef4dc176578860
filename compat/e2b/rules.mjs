// E2B's network.rules with the unmodified e2b SDK: a header injected into
// the sandbox's HTTPS requests to one host, kept out of the sandbox,
// replaced, made several headers and cleared by updateNetwork. rules_test.go serves RULES_HOST
// and RULES_OTHER (HTTPS, a CA the sandbox does not trust) and checks
// after the run what each request path carried to the upstream.
const { Sandbox, ALL_TRAFFIC } = await import(process.env.E2B_PACKAGE || 'e2b')
import { readFile } from 'node:fs/promises'
import { assert, eq, run, template } from './lib.mjs'

const host = process.env.RULES_HOST
const other = process.env.RULES_OTHER
const v1 = process.env.RULES_V1
const v2 = process.env.RULES_V2
assert(host && other && v1 && v2, 'RULES_HOST, RULES_OTHER, RULES_V1 and RULES_V2 are set')

const allowOut = [host, other]
const rule = (v) => ({ [host]: [{ transform: { headers: { 'X-Rule': v } } }] })
const sbx = await Sandbox.create(template, { timeoutMs: 300_000, network: { allowOut, denyOut: [ALL_TRAFFIC], rules: rule(v1) } })

// get runs httpsget in the sandbox and returns its stdout, whatever its
// exit status.
async function get(args) {
  const r = await sbx.commands.run('/tmp/httpsget ' + args).catch((e) => e)
  return String(r.stdout ?? '') + String(r.stderr ?? '')
}

async function refused(fn, what) {
  try {
    await fn()
  } catch (e) {
    assert(String(e?.message).includes(what), `error names ${what}: ${e?.message}`)
    return
  }
  throw new Error(`${what}: not refused`)
}

try {
  const bin = await readFile('httpsget')
  await sbx.files.write('/tmp/httpsget', new Blob([bin]))
  await sbx.commands.run('chmod 755 /tmp/httpsget')

  await run('network.rules', [
    ['the rule sets the header on requests to its host', async () => {
      const out = await get(`-H 'X-Rule: placeholder' https://${host}/one`)
      assert(out.startsWith('200\nhello from ' + host), `GET ${host}/one: ${out}`)
    }],
    ['a host without a rule gets nothing (and is not intercepted)', async () => {
      const out = await get(`-k -H 'X-Rule: placeholder' https://${other}/one`)
      assert(out.startsWith('200\n'), `GET ${other}/one: ${out}`)
      const strict = await get(`https://${other}/strict`)
      assert(!strict.startsWith('200'), `${other}'s real certificate accepted without its CA: ${strict}`)
    }],
    ['the sandbox cannot read the value', async () => {
      const echo = await get(`https://${host}/echo`)
      assert(echo.startsWith('200\necho *'), `the echo answer: ${echo}`)
      assert(!echo.includes(v1), 'the echo answer carries the value')
      // The pattern matches the value without containing it, so grep's
      // own command line does not match.
      const pattern = v1.slice(0, -1) + '[' + v1.slice(-1) + ']'
      const r = await sbx.commands.run(`grep -rl '${pattern}' /etc /tmp /root /home /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null; env | grep -c '${pattern}'`).catch((e) => e)
      eq(String(r.stdout).trim(), '0', 'files or environment holding the value')
    }],
    ['getInfo lists the rule without its value', async () => {
      const info = await sbx.getInfo()
      const rules = info.network?.rules
      assert(rules && rules[host], `getInfo's network.rules: ${JSON.stringify(rules)}`)
      eq(JSON.stringify(rules[host]), JSON.stringify([{ transform: { headers: { 'X-Rule': '' } } }]), 'the rule as getInfo says it')
      assert(!JSON.stringify(info).includes(v1), 'getInfo carries the value')
    }],
    ['hostile rules are refused and change nothing', async () => {
      await refused(() => sbx.updateNetwork({ allowOut, denyOut: [ALL_TRAFFIC], rules: { [host]: [{ transform: { headers: { Host: v2 } } }] } }), 'header Host frames or routes')
      await refused(() => sbx.updateNetwork({ allowOut, denyOut: [ALL_TRAFFIC], rules: rule(v2 + '\r\nX-Evil: 1') }), 'CR, LF or NUL')
      await refused(() => sbx.updateNetwork({ allowOut, denyOut: [ALL_TRAFFIC], rules: { '*': [{ transform: { headers: { 'X-Rule': v2 } } }] } }), 'not a host name')
    }],
    ['updateNetwork replaces the rule', async () => {
      await sbx.updateNetwork({ allowOut, denyOut: [ALL_TRAFFIC], rules: rule(v2) })
      const out = await get(`https://${host}/two`)
      assert(out.startsWith('200\n'), `GET ${host}/two: ${out}`)
    }],
    ['several headers for one host, from one rule and from the next', async () => {
      const rules = { [host]: [{ transform: { headers: { 'X-Rule': v1 } } }, { transform: { headers: { 'X-Second': v2 } } }] }
      await sbx.updateNetwork({ allowOut, denyOut: [ALL_TRAFFIC], rules })
      const out = await get(`-H 'X-Second: placeholder' https://${host}/multi`)
      assert(out.startsWith('200\n'), `GET ${host}/multi: ${out}`)
      const echo = await get(`https://${host}/echo-multi`)
      assert(/^200\necho \*+ \*+\n/.test(echo), `the echo answer, both values removed: ${echo}`)
      assert(!echo.includes(v1) && !echo.includes(v2), 'the echo answer carries a value')
      const info = await sbx.getInfo()
      eq(JSON.stringify(info.network?.rules?.[host]), JSON.stringify([{ transform: { headers: { 'X-Rule': '', 'X-Second': '' } } }]), 'the rule as getInfo says it')
      await refused(() => sbx.updateNetwork({ allowOut, denyOut: [ALL_TRAFFIC], rules: { [host]: [{ transform: { headers: { 'X-Rule': v1 } } }, { transform: { headers: { 'x-rule': v2 } } }] } }), 'sets header x-rule twice')
    }],
    ['updateNetwork without rules clears them', async () => {
      await sbx.updateNetwork({ allowOut, denyOut: [ALL_TRAFFIC] })
      const out = await get(`-k https://${host}/three`)
      assert(out.startsWith('200\n'), `GET ${host}/three: ${out}`)
      const info = await sbx.getInfo()
      assert(!info.network?.rules || Object.keys(info.network.rules).length === 0, `rules left: ${JSON.stringify(info.network?.rules)}`)
    }],
  ])
} finally {
  await sbx.kill()
}
