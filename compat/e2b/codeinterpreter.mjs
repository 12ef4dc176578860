// The code interpreter with the unmodified @e2b/code-interpreter SDK:
// Sandbox.create() with no template (the SDK's default, code-interpreter-v1,
// is SPACE's code-interpreter template), runCode's results, streamed
// output, errors and state, a matplotlib chart as PNG, contexts and a Bash
// context. Driven by codeinterpreter_test.go.
import { Sandbox } from '@e2b/code-interpreter'
import { assert, eq, run } from './lib.mjs'

let sbx
const timings = { create: 0, first: 0, warm: [] }

const tests = [
  ['create with the default template', async () => {
    const t0 = Date.now()
    sbx = await Sandbox.create({ timeoutMs: 600_000 })
    timings.create = Date.now() - t0
    const info = await sbx.getInfo()
    eq(info.templateId, 'code-interpreter', 'templateId of the default template')
  }],
  ["runCode('1+1')", async () => {
    const t0 = Date.now()
    const ex = await sbx.runCode('1+1')
    timings.first = Date.now() - t0
    eq(ex.text, '2', 'text of 1+1')
    eq(ex.results.length, 1, 'results')
    eq(ex.results[0].isMainResult, true, 'isMainResult')
    eq(ex.error, undefined, 'error')
    assert(Number.isInteger(ex.executionCount) && ex.executionCount >= 1, `executionCount ${ex.executionCount}`)
    for (let i = 0; i < 20; i++) {
      const s = Date.now()
      eq((await sbx.runCode('1+1')).text, '2', 'warm 1+1')
      timings.warm.push(Date.now() - s)
    }
  }],
  ['stdout and stderr are streamed', async () => {
    // The second line is printed 1.5 s after the first: the first must
    // arrive before the execution ends.
    const seen = []
    const t0 = Date.now()
    const ex = await sbx.runCode(
      'import sys, time\nprint("one", flush=True)\nprint("err", file=sys.stderr, flush=True)\ntime.sleep(1.5)\nprint("two")',
      {
        onStdout: (m) => seen.push(['out', m.line, Date.now() - t0]),
        onStderr: (m) => seen.push(['err', m.line, Date.now() - t0]),
      })
    const end = Date.now() - t0
    eq(ex.logs.stdout.join(''), 'one\ntwo\n', 'stdout')
    eq(ex.logs.stderr.join(''), 'err\n', 'stderr')
    const one = seen.find((s) => s[1] === 'one\n')
    assert(one, `no stdout callback for "one": ${JSON.stringify(seen)}`)
    assert(seen.some((s) => s[0] === 'err' && s[1] === 'err\n'), `no stderr callback: ${JSON.stringify(seen)}`)
    assert(end - one[2] >= 1000, `"one" came ${one[2]} ms in, the execution ended at ${end} ms: not streamed`)
  }],
  ['an error has name, value and traceback', async () => {
    let cb
    const ex = await sbx.runCode('def f():\n    raise ValueError("bad value")\nf()', { onError: (e) => { cb = e } })
    assert(ex.error, 'no error')
    eq(ex.error.name, 'ValueError', 'error name')
    eq(ex.error.value, 'bad value', 'error value')
    // The kernel's traceback, with IPython's colours as on E2B.
    const plain = ex.error.traceback.replace(/\x1b\[[0-9;]*m/g, '')
    assert(plain.includes('raise ValueError("bad value")') && plain.includes('----> 3 f()'), `traceback: ${plain}`)
    eq(cb?.name, 'ValueError', 'onError')
  }],
  ['state is kept across calls', async () => {
    await sbx.runCode('x = 41')
    eq((await sbx.runCode('x + 1')).text, '42', 'x + 1')
    eq((await sbx.runCode('import os; os.getcwd()')).text, "'/home/user'", 'cwd of the default context')
    eq((await sbx.runCode('import getpass; getpass.getuser()')).text, "'user'", 'the kernel runs as')
  }],
  ['per-call envs', async () => {
    eq((await sbx.runCode('import os; os.environ.get("SPACE_CI")', { envs: { SPACE_CI: 'yes' } })).text, "'yes'", 'env in the call')
    eq((await sbx.runCode('import os; str(os.environ.get("SPACE_CI"))')).text, "'None'", 'env after the call')
  }],
  ['timeoutMs interrupts the execution and keeps the state', async () => {
    await sbx.runCode('kept = 5')
    let err
    const t0 = Date.now()
    try { await sbx.runCode('import time\nfor i in range(600): time.sleep(0.1)', { timeoutMs: 1500 }) } catch (e) { err = e }
    assert(err && err.name === 'TimeoutError', `runCode past timeoutMs: ${err}`)
    // The kernel was interrupted: the next call does not wait for the loop.
    const ex = await sbx.runCode('kept + 1', { timeoutMs: 20_000 })
    // Once seen under load (1 run in about 8): this call came back at once
    // without its result; what it did carry says why, next time.
    eq(ex.text, '6', `state after the interrupt (error ${JSON.stringify(ex.error)}, logs ${JSON.stringify(ex.logs)}, results ${JSON.stringify(ex.results.map((r) => r.formats()))})`)
    assert(Date.now() - t0 < 20_000, `the next call waited ${Date.now() - t0} ms: the loop was not interrupted`)
  }],
  ['rich results: a matplotlib chart as PNG, HTML, Markdown, JSON, LaTeX', async () => {
    const ex = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()')
    eq(ex.error, undefined, 'error')
    const png = ex.results.find((r) => r.png)
    assert(png, `no PNG result: ${JSON.stringify(ex.results.map((r) => r.formats()))}`)
    const bytes = Buffer.from(png.png, 'base64')
    eq(bytes.subarray(1, 4).toString(), 'PNG', 'PNG signature')
    eq(png.isMainResult, false, 'a display is not the main result')
    const rich = await sbx.runCode(
      'from IPython.display import HTML, Markdown, JSON, Latex, display\n' +
      'display(Markdown("# hi"))\ndisplay(JSON({"a": 1}))\ndisplay(Latex(r"$x^2$"))\nHTML("<b>b</b>")')
    eq(rich.results.length, 4, 'results')
    eq(rich.results[0].markdown, '# hi', 'markdown')
    eq(rich.results[1].json?.a, 1, 'json')
    eq(rich.results[2].latex, '$x^2$', 'latex')
    eq(rich.results[3].html, '<b>b</b>', 'html')
    eq(rich.results[3].isMainResult, true, 'main result')
    const df = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2]})')
    assert(df.results[0].html?.includes('<table'), `DataFrame html: ${df.results[0].html}`)
  }],
  ['contexts: create, list, run, restart, remove', async () => {
    const ctx = await sbx.createCodeContext({ language: 'python', cwd: '/tmp' })
    assert(ctx.id, 'context id')
    eq(ctx.language, 'python', 'language')
    eq(ctx.cwd, '/tmp', 'cwd')
    assert((await sbx.listCodeContexts()).some((c) => c.id === ctx.id), 'listed')
    eq((await sbx.runCode('import os; os.getcwd()', { context: ctx })).text, "'/tmp'", 'cwd in the context')
    await sbx.runCode('y = 7', { context: ctx })
    eq((await sbx.runCode('y', { context: ctx })).text, '7', 'y in the context')
    eq((await sbx.runCode('"y" in dir()')).text, 'False', 'contexts are separate')
    await sbx.restartCodeContext(ctx)
    const after = await sbx.runCode('y', { context: ctx })
    eq(after.error?.name, 'NameError', 'y after restart')
    await sbx.removeCodeContext(ctx)
    assert(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id), 'removed')
    let err
    try { await sbx.runCode('1', { context: ctx }) } catch (e) { err = e }
    assert(err && /not found/.test(err.message), `run in a removed context: ${err}`)
  }],
  ['a kernel crash restarts the context and reports it', async () => {
    const ctx = await sbx.createCodeContext()
    await sbx.runCode('z = 1', { context: ctx })
    const ex = await sbx.runCode('import os; os._exit(3)', { context: ctx })
    eq(ex.error?.name, 'KernelDied', 'error of a dead kernel')
    eq((await sbx.runCode('2*3', { context: ctx })).text, '6', 'the restarted context runs code')
    eq((await sbx.runCode('"z" in dir()', { context: ctx })).text, 'False', 'state after the restart')
    await sbx.removeCodeContext(ctx)
  }],
  ['a Bash context keeps its state', async () => {
    const ctx = await sbx.createCodeContext({ language: 'bash' })
    eq(ctx.language, 'bash', 'language')
    const out = []
    const ex = await sbx.runCode('cd /tmp; V=hello; echo "$V $(pwd)"; echo oops >&2', { context: ctx, onStdout: (m) => out.push(m.line) })
    eq(ex.logs.stdout.join(''), 'hello /tmp\n', 'stdout')
    eq(ex.logs.stderr.join(''), 'oops\n', 'stderr')
    eq(out.join(''), 'hello /tmp\n', 'onStdout')
    eq((await sbx.runCode('echo "$V $(pwd) $(whoami)"', { context: ctx })).logs.stdout.join(''), 'hello /tmp user\n', 'state')
    eq((await sbx.runCode('echo $SPACE_CI', { context: ctx, envs: { SPACE_CI: "it's" } })).logs.stdout.join(''), "it's\n", 'envs')
    eq((await sbx.runCode('echo "[$SPACE_CI]"', { context: ctx })).logs.stdout.join(''), '[]\n', 'envs after')
    const fail = await sbx.runCode('false', { context: ctx })
    eq(fail.error?.name, 'ExitCodeError', 'exit status 1')
    const lang = await sbx.runCode('echo by-language', { language: 'bash' })
    eq(lang.logs.stdout.join(''), 'by-language\n', 'language: bash')
    await sbx.removeCodeContext(ctx)
  }],
  ["the e2b SDK's git helper (the template has git, as base has)", async () => {
    // Sandbox.git runs git through commands.run: init, config, add,
    // commit, status, branches, remotes, clone, push and pull, here
    // against a bare repository in the sandbox.
    const g = sbx.git
    await g.init('/home/user/repo', { initialBranch: 'main' })
    await g.configureUser('Space CI', 'ci@space.invalid')
    eq(await g.getConfig('user.name'), 'Space CI', 'getConfig')
    await sbx.files.write('/home/user/repo/a.txt', 'one\n')
    eq((await g.status('/home/user/repo')).fileStatus.length, 1, 'status of one new file')
    await g.add('/home/user/repo', { all: true })
    await g.commit('/home/user/repo', 'first')
    eq((await g.status('/home/user/repo')).isClean, true, 'clean after the commit')
    await g.createBranch('/home/user/repo', 'feature')
    const br = await g.branches('/home/user/repo')
    assert(br.branches.includes('main') && br.branches.includes('feature') && br.currentBranch === 'feature', `branches: ${JSON.stringify(br)}`)
    await g.checkoutBranch('/home/user/repo', 'main')
    await g.deleteBranch('/home/user/repo', 'feature', { force: true })
    await sbx.commands.run('git init --bare -q /home/user/remote.git')
    await g.remoteAdd('/home/user/repo', 'origin', '/home/user/remote.git')
    eq(await g.remoteGet('/home/user/repo', 'origin'), '/home/user/remote.git', 'remoteGet')
    await g.push('/home/user/repo', { remote: 'origin', branch: 'main', setUpstream: true })
    await g.clone('/home/user/remote.git', { path: '/home/user/clone', branch: 'main' })
    eq(await sbx.files.read('/home/user/clone/a.txt'), 'one\n', 'the cloned file')
    await sbx.files.write('/home/user/repo/a.txt', 'two\n')
    await g.restore('/home/user/repo', { paths: ['a.txt'] })
    eq(await sbx.files.read('/home/user/repo/a.txt'), 'one\n', 'restore')
    await g.pull('/home/user/clone')
    await g.reset('/home/user/clone', { mode: 'hard', target: 'HEAD' })
    await g.setConfig('pull.rebase', 'false', { scope: 'global' })
    eq(await g.getConfig('pull.rebase', { scope: 'global' }), 'false', 'global config')
  }],
  ['an unsupported language is refused with 400', async () => {
    let err
    try { await sbx.runCode('1', { language: 'r' }) } catch (e) { err = e }
    assert(err && /^400/.test(err.message), `language r: ${err}`)
  }],
  ['a JavaScript context is refused with 400 (the template has no Node kernel)', async () => {
    for (const call of [() => sbx.runCode('1+1', { language: 'js' }), () => sbx.createCodeContext({ language: 'javascript' })]) {
      let err
      try { await call() } catch (e) { err = e }
      assert(err && /^400/.test(err.message), `language js: ${err}`)
    }
  }],
]

await run('codeinterpreter', tests, async () => {
  const w = [...timings.warm].sort((a, b) => a - b)
  if (w.length) {
    console.log(`timing: create ${timings.create} ms, first runCode('1+1') ${timings.first} ms, ` +
      `warm runCode('1+1') p50 ${w[Math.floor(w.length / 2)]} ms (min ${w[0]}, max ${w[w.length - 1]}, n=${w.length})`)
  }
  if (sbx) await sbx.kill()
})
