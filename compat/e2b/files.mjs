// The filesystem through the unmodified e2b SDK.
import { randomBytes } from 'node:crypto'
import { Sandbox, FileType, NotFoundError } from 'e2b'
import { assert, eq, rejects, run, sha256, template, waitFor } from './lib.mjs'

const sbx = await Sandbox.create(template, { timeoutMs: 300_000 })
const dir = '/home/user/compat'

await run('files', [
  ['write and read text', async () => {
    const info = await sbx.files.write(`${dir}/a.txt`, 'hello files')
    eq(info.path, `${dir}/a.txt`, 'written path')
    eq(await sbx.files.read(`${dir}/a.txt`), 'hello files', 'read back')
  }],
  ['read bytes and relative paths', async () => {
    await sbx.files.write('rel.txt', 'relative', { user: 'user' })
    const b = await sbx.files.read('/home/user/rel.txt', { format: 'bytes' })
    eq(new TextDecoder().decode(b), 'relative', 'bytes')
  }],
  ['gzip and streamed transfers', async () => {
    await sbx.files.write(`${dir}/gz.txt`, 'compressed '.repeat(1000), { gzip: true })
    eq(await sbx.files.read(`${dir}/gz.txt`, { gzip: true }), 'compressed '.repeat(1000), 'gzip round trip')
    const chunks = ['one ', 'two ', 'three']
    const stream = new ReadableStream({
      pull(c) { const next = chunks.shift(); if (next === undefined) c.close(); else c.enqueue(new TextEncoder().encode(next)) },
    })
    await sbx.files.write(`${dir}/streamed.txt`, stream)
    const rs = await sbx.files.read(`${dir}/streamed.txt`, { format: 'stream' })
    eq(await new Response(rs).text(), 'one two three', 'streamed round trip')
  }],
  ['list, exists, getInfo', async () => {
    await sbx.files.write(`${dir}/b.txt`, 'bb')
    const names = (await sbx.files.list(dir)).map((e) => e.name).sort()
    assert(names.includes('a.txt') && names.includes('b.txt'), 'listed ' + names)
    eq(await sbx.files.exists(`${dir}/b.txt`), true, 'exists')
    eq(await sbx.files.exists(`${dir}/nope`), false, 'exists missing')
    const info = await sbx.files.getInfo(`${dir}/b.txt`)
    eq(info.type, FileType.FILE, 'type')
    eq(info.size, 2, 'size')
  }],
  ['makeDir, rename, remove', async () => {
    eq(await sbx.files.makeDir(`${dir}/sub/deeper`), true, 'makeDir new')
    eq(await sbx.files.makeDir(`${dir}/sub/deeper`), false, 'makeDir existing')
    const moved = await sbx.files.rename(`${dir}/b.txt`, `${dir}/sub/c.txt`)
    eq(moved.path, `${dir}/sub/c.txt`, 'renamed path')
    eq(await sbx.files.read(`${dir}/sub/c.txt`), 'bb', 'renamed content')
    await sbx.files.remove(`${dir}/sub`)
    eq(await sbx.files.exists(`${dir}/sub`), false, 'removed')
    await sbx.files.remove(`${dir}/sub`) // envd removes a missing path without error
  }],
  ['getInfo of a symlink', async () => {
    await sbx.files.write(`${dir}/target.txt`, 't')
    await sbx.commands.run(`cd ${dir} && ln -s target.txt link1 && ln -s ./link1 link2 && ln -s nowhere dangling`)
    for (const name of ['link1', 'link2']) {
      const info = await sbx.files.getInfo(`${dir}/${name}`)
      eq(info.type, FileType.SYMLINK, `${name} type`)
      eq(info.symlinkTarget, `${dir}/target.txt`, `${name} symlinkTarget (resolved and absolute, as envd reports it)`)
    }
    eq((await sbx.files.getInfo(`${dir}/dangling`)).symlinkTarget, `${dir}/nowhere`, 'dangling symlinkTarget')
  }],
  ['write with metadata', async () => {
    const w = await sbx.files.write(`${dir}/md.txt`, 'm', { metadata: { owner: 'alice', stage: 'raw data' } })
    eq(JSON.stringify(w.metadata), JSON.stringify({ owner: 'alice', stage: 'raw data' }), 'metadata in the write answer')
    const info = await sbx.files.getInfo(`${dir}/md.txt`)
    eq(info.metadata?.owner, 'alice', 'getInfo metadata owner')
    eq(info.metadata?.stage, 'raw data', 'getInfo metadata stage')
    const listed = (await sbx.files.list(dir)).find((e) => e.name === 'md.txt')
    eq(listed?.metadata?.owner, 'alice', 'list metadata')
    await sbx.files.write(`${dir}/md.txt`, 'm2')
    eq((await sbx.files.getInfo(`${dir}/md.txt`)).metadata, undefined, 'a write without metadata replaces it')
  }],
  ['read missing is NotFoundError', async () => {
    await rejects(() => sbx.files.read(`${dir}/missing`), NotFoundError, 'read missing')
  }],
  ['watchDir', async () => {
    await sbx.files.makeDir(`${dir}/w`)
    const events = []
    const h = await sbx.files.watchDir(`${dir}/w`, (e) => events.push(e))
    await sbx.files.write(`${dir}/w/new.txt`, 'x')
    await waitFor(() => events.some((e) => e.name === 'new.txt'), 'watch event for new.txt')
    await h.stop()
  }],
  ['50 MiB upload and download', async () => {
    const data = randomBytes(50 << 20)
    const want = sha256(data)
    await sbx.files.write(`${dir}/big.bin`, data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength), { requestTimeoutMs: 120_000 })
    const r = await sbx.commands.run(`sha256sum ${dir}/big.bin`)
    eq(r.stdout.split(' ')[0], want, 'sha256 in the sandbox')
    const back = await sbx.files.read(`${dir}/big.bin`, { format: 'bytes', requestTimeoutMs: 120_000 })
    eq(back.length, data.length, 'downloaded length')
    eq(sha256(back), want, 'downloaded sha256')
  }],
  ['signed download and upload URLs', async () => {
    await sbx.files.write(`${dir}/signed.txt`, 'signed content')
    const down = await sbx.downloadUrl(`${dir}/signed.txt`, { useSignatureExpiration: 60 })
    const res = await fetch(down)
    eq(res.status, 200, 'download status')
    eq(await res.text(), 'signed content', 'download body')
    const tampered = new URL(down)
    const sig = tampered.searchParams.get('signature')
    tampered.searchParams.set('signature', sig.slice(0, -1) + (sig.endsWith('A') ? 'B' : 'A'))
    const bad = await fetch(tampered)
    eq(bad.status, 401, 'tampered signature status')
    const old = await fetch(await sbx.downloadUrl(`${dir}/signed.txt`, { useSignatureExpiration: -10 }))
    eq(old.status, 401, 'expired signature status')
    eq((await old.json()).message, 'signature is already expired', 'expired signature message (envd\'s)')
    const up = await sbx.uploadUrl(`${dir}/uploaded.txt`)
    const form = new FormData()
    form.append('file', new Blob(['via url']), 'uploaded.txt')
    const put = await fetch(up, { method: 'POST', body: form })
    eq(put.status, 200, 'upload status')
    eq(await sbx.files.read(`${dir}/uploaded.txt`), 'via url', 'uploaded content')
  }],
], () => sbx.kill())
