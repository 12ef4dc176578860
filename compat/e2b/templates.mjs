// Template.build with the published SDK against SPACE (docs/e2b.md): a
// template from a SPACE template with runCmd, copy, setWorkdir, setEnvs
// and setStartCmd with a readyCmd, its build log streamed, then a sandbox
// of it; a readyCmd passes in every new sandbox before its first command;
// a second build reuses the kept upload; a failing runCmd is a BuildError naming its step; fromImage of a
// registry image is refused naming the feature, one of an OCI layout on the server builds (imported once per
// content: a copy under another path reuses the import, changed content imports anew); a hostile upload (a symlink out of the file
// context) is refused; a rebuild under one alias replaces the template
// (cpuCount/memoryMB size its sandboxes, its one tag is default), for
// SPACE's own POST /v1/sandboxes of the alias too.
import { Template, Sandbox, BuildError, FileUploadError, waitForFile } from 'e2b'
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { assert, eq, rejects, run, template, waitFor } from './lib.mjs'

const ctx = mkdtempSync(join(tmpdir(), 'e2btpl-'))
writeFileSync(join(ctx, 'hello.txt'), 'hello from the upload\n')
mkdirSync(join(ctx, 'tools'))
writeFileSync(join(ctx, 'tools', 'tool.sh'), '#!/bin/sh\necho tool ran\n', { mode: 0o755 })
mkdirSync(join(ctx, 'evil'))
symlinkSync('/etc/passwd', join(ctx, 'evil', 'passwd'))

const name = 'e2btpl-' + process.pid

// spaceAPI calls SPACE's own API (E2B_SANDBOX_URL is its URL, the same listener).
async function spaceAPI(method, path, body) {
  const headers = { Authorization: `Bearer ${process.env.SPACE_KEY}`, 'Content-Type': 'application/json' }
  const res = await fetch(process.env.E2B_SANDBOX_URL + path, { method, headers, body: body && JSON.stringify(body) })
  const text = await res.text()
  if (!res.ok) throw new Error(`${method} ${path}: HTTP ${res.status}: ${text}`)
  return text ? JSON.parse(text) : undefined
}
const sandboxes = []

await run('templates', [
  ['Template.build: steps, logs streamed, readyCmd', async () => {
    const logs = []
    const t = Template({ fileContextPath: ctx })
      .fromTemplate(template)
      .runCmd('echo built > /built.txt')
      .copy('hello.txt', '/app/hello.txt')
      .copy('tools', '/app/tools')
      .setWorkdir('/app')
      .setEnvs({ GREETING: 'hi' })
      .runCmd('echo "$GREETING from $(pwd)" > ran.txt')
      .setStartCmd('echo started > /tmp/started; exec sleep 100000', waitForFile('/tmp/started'))
    const info = await Template.build(t, name, { onBuildLogs: (e) => logs.push(e.message) })
    eq(info.name, name, 'built name')
    const text = logs.join('\n')
    assert(text.includes('step 2/7: COPY'), `the log names the steps:\n${text}`)
    assert(text.includes('ready check'), `the log shows the ready check:\n${text}`)
    assert(text.includes(`template ${name} ready`), `the log ends ready:\n${text}`)
    assert(await Template.exists(name), 'Template.exists after the build')
    assert(!(await Template.exists(name + '-none')), 'Template.exists of a free name')
  }],
  ['Sandbox.create of the template sees the files, env and start command', async () => {
    const sbx = await Sandbox.create(name, { timeoutMs: 120_000 })
    sandboxes.push(sbx)
    const r = await sbx.commands.run('cat /built.txt /app/hello.txt /app/ran.txt && /app/tools/tool.sh && echo "$GREETING"')
    eq(r.stdout, 'built\nhello from the upload\nhi from /app\ntool ran\nhi\n', 'files, env')
    await waitFor(async () => (await sbx.commands.run('cat /tmp/started 2>/dev/null || true')).stdout === 'started\n', 'the start command', 30_000)
  }],
  ['a readyCmd runs in every sandbox of the template: the first command sees it passed', async () => {
    // /dev/shm is the sandbox's own tmpfs, not in the template's tree: the
    // file the build sandbox's check saw is gone, and only this sandbox's
    // start command (12 s in: past the host's old 10 s bound on the
    // guest's start) makes it again.
    const t = Template().fromTemplate(template)
      .setStartCmd('sleep 12; touch /dev/shm/ready; exec sleep 100000', 'test -f /dev/shm/ready')
    await Template.build(t, name + '-ready')
    const sbx = await Sandbox.create(name + '-ready', { timeoutMs: 60_000 })
    sandboxes.push(sbx)
    const r = await sbx.commands.run('test -f /dev/shm/ready && echo ready || echo not-ready')
    eq(r.stdout, 'ready\n', 'the first command of a new sandbox, after the readyCmd passed')
  }],
  ['an upload is kept for the tenant: a second build skips it', async () => {
    const logs = []
    const t = Template({ fileContextPath: ctx }).fromTemplate(template).copy('hello.txt', '/app/hello.txt')
    await Template.build(t, name + '-again', { onBuildLogs: (e) => logs.push(e.message) })
    assert(logs.some((l) => l.includes("Skipping upload of 'hello.txt', already cached")), `the SDK skipped the upload:\n${logs.join('\n')}`)
    const sbx = await Sandbox.create(name + '-again', { timeoutMs: 60_000 })
    sandboxes.push(sbx)
    eq((await sbx.commands.run('cat /app/hello.txt')).stdout, 'hello from the upload\n', 'the kept upload copied')
  }],
  ['a failing runCmd is a BuildError naming its step', async () => {
    const t = Template({ fileContextPath: ctx }).fromTemplate(template)
      .runCmd('true')
      .runCmd('echo about to fail; exit 7')
    const bg = await Template.buildInBackground(t, name + '-fail')
    let st
    await waitFor(async () => {
      st = await Template.getBuildStatus(bg)
      return st.status === 'error'
    }, 'the failed build', 120_000)
    eq(st.reason.step, '2', 'the failing step')
    assert(st.reason.message.includes('exit code 7') && st.reason.message.includes('about to fail'), `reason: ${st.reason.message}`)
    const e = await rejects(() => Template.build(t, name + '-fail2'), BuildError, 'Template.build of a failing step')
    assert(e.message.includes('exit code 7'), `BuildError: ${e.message}`)
  }],
  ['a rebuild under one alias replaces the template once ready: new sandboxes see it, a running one keeps the old, a failed rebuild changes nothing', async () => {
    const alias = name + '-re'
    await Template.build(Template().fromTemplate(template).runCmd('echo one > /version'), alias)
    const old = await Sandbox.create(alias, { timeoutMs: 120_000 })
    sandboxes.push(old)
    eq((await old.commands.run('cat /version')).stdout, 'one\n', 'the first build')
    const info = await Template.build(Template().fromTemplate(template).runCmd('echo two > /version'), alias, { cpuCount: 2, memoryMB: 256 })
    const sbx = await Sandbox.create(alias, { timeoutMs: 120_000 })
    sandboxes.push(sbx)
    eq((await sbx.commands.run('cat /version')).stdout, 'two\n', 'a new sandbox of the alias after the rebuild')
    const got = await sbx.getInfo()
    eq(`${got.cpuCount} ${got.memoryMB}`, '2 256', 'the rebuild\'s cpuCount and memoryMB size the sandbox')
    eq((await old.commands.run('cat /version')).stdout, 'one\n', 'the sandbox of the first build runs on')
    await rejects(() => Template.build(Template().fromTemplate(template).runCmd('exit 3'), alias), BuildError, 'a failing rebuild')
    const after = await Sandbox.create(alias, { timeoutMs: 120_000 })
    sandboxes.push(after)
    eq((await after.commands.run('cat /version')).stdout, 'two\n', 'a failed rebuild leaves the last good build')
    // SPACE's own create of the alias starts the same build and names its template.
    const native = await spaceAPI('POST', '/v1/sandboxes', { template: alias })
    const nsbx = await Sandbox.connect(native.id, { timeoutMs: 120_000 })
    sandboxes.push(nsbx)
    assert(native.template.startsWith(alias + '.'), `POST /v1/sandboxes of ${alias} started template ${native.template}, want the rebuild's ${alias}.…`)
    eq((await nsbx.commands.run('cat /version')).stdout, 'two\n', 'a sandbox of the alias made through /v1 after the rebuild')
    const tags = await Template.getTags(alias)
    eq(tags.map((t) => `${t.tag} ${t.buildId}`).join(','), `default ${info.buildId}`, 'the one tag, default, on the latest build')
    const e = await rejects(() => Template.build(Template().fromTemplate(template), alias + ':v2'), BuildError, 'a tag other than default')
    assert(e.message.includes('template tag "v2"'), `refusal: ${e.message}`)
  }],
  ['fromImage of a registry image is refused naming the feature', async () => {
    const t = Template().fromImage('ubuntu:22.04').runCmd('true')
    const e = await rejects(() => Template.build(t, name + '-img'), BuildError, 'fromImage')
    assert(e.message.includes('fromImage') && e.message.includes('fromTemplate'), `message: ${e.message}`)
  }],
  ['fromImage of an OCI layout on the server: imported once, the steps on top', async () => {
    const src = `oci:${process.env.E2B_OCI_LAYOUT}#compat:1`
    const logs = []
    const t = Template().fromImage(src).runCmd('cat /etc/msg > /from-steps')
    await Template.build(t, name + '-oci', { onBuildLogs: (e) => logs.push(e.message) })
    assert(logs.some((l) => l.includes('base: importing oci:')), `the log names the import:\n${logs.join('\n')}`)
    const sbx = await Sandbox.create(name + '-oci', { timeoutMs: 60_000 })
    sandboxes.push(sbx)
    // The image has no /bin/bash for commands.run: read the step's file.
    eq(await sbx.files.read('/from-steps', { user: 'root' }), 'from the image\n', 'the step ran on the image')
    const again = []
    await Template.build(Template().fromImage(src).runCmd('true'), name + '-oci2', { onBuildLogs: (e) => again.push(e.message) })
    assert(again.some((l) => l.includes('imported already')), `a second build reuses the import:\n${again.join('\n')}`)
    // The import is named after the image's content, not its path: a copy
    // under another path reuses it; that path with new content imports anew.
    const copy = `oci:${process.env.E2B_OCI_LAYOUT_COPY}#compat:1`
    const same = []
    await Template.build(Template().fromImage(copy).runCmd('true'), name + '-oci3', { onBuildLogs: (e) => same.push(e.message) })
    assert(same.some((l) => l.includes('imported already')), `the same image under another path reuses the import:\n${same.join('\n')}`)
    const ix = join(process.env.E2B_OCI_LAYOUT_COPY, 'index.json')
    writeFileSync(ix, readFileSync(ix, 'utf8') + '\n')
    const anew = []
    await Template.build(Template().fromImage(copy).runCmd('true'), name + '-oci4', { onBuildLogs: (e) => anew.push(e.message) })
    assert(anew.some((l) => l.includes('base: importing oci:')), `new content under a path imported before is imported anew:\n${anew.join('\n')}`)
  }],
  ['a hostile upload is refused', async () => {
    const t = Template({ fileContextPath: ctx }).fromTemplate(template).copy('evil', '/evil')
    await rejects(() => Template.build(t, name + '-evil'), FileUploadError, 'symlink out of the context')
    assert(!(await Template.exists(name + '-evil')), 'no template of the refused build')
  }],
], async () => {
  for (const s of sandboxes) await s.kill().catch(() => {})
})
