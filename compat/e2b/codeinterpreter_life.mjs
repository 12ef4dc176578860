// The code interpreter's lifecycle with the unmodified @e2b/code-interpreter
// SDK, short enough for a vm under TCG: one sandbox, few calls. State across
// calls, a matplotlib chart as PNG, an error with its traceback, and the
// state across the SDK's pause() and Sandbox.connect() (resume). Driven by
// codeinterpreter_test.go on ns and vm, side by side, and by
// BenchmarkCodeInterpreterWarmPool (CI_ROUNDS rounds of runCode('1+1')
// against commands.run('true'), interleaved, printed as a timing-json line).
import { Sandbox } from '@e2b/code-interpreter'
import { assert, eq, run } from './lib.mjs'

let sbx
const rounds = Number(process.env.CI_ROUNDS || 5)
const timings = { create: 0, first: 0, code: [], exec: [] }

const tests = [
  ['create with the default template', async () => {
    const t0 = Date.now()
    sbx = await Sandbox.create({ timeoutMs: 1_800_000, requestTimeoutMs: 300_000 })
    timings.create = Date.now() - t0
  }],
  ['state across calls', async () => {
    const t0 = Date.now()
    const first = await sbx.runCode('1+1', { timeoutMs: 300_000 })
    timings.first = Date.now() - t0
    eq(first.text, '2', 'first 1+1')
    // Figures, not assertions: runCode('1+1') against a raw exec of `true`
    // in the same sandbox, interleaved.
    for (let i = 0; i < rounds; i++) {
      let s = Date.now()
      eq((await sbx.runCode('1+1')).text, '2', 'warm 1+1')
      timings.code.push(Date.now() - s)
      s = Date.now()
      eq((await sbx.commands.run('true')).exitCode, 0, 'exec true')
      timings.exec.push(Date.now() - s)
    }
    await sbx.runCode('x = 41')
    eq((await sbx.runCode('x + 1')).text, '42', 'x + 1')
  }],
  ['a matplotlib chart as PNG', async () => {
    const ex = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()', { timeoutMs: 300_000 })
    eq(ex.error, undefined, 'error')
    const png = ex.results.find((r) => r.png)
    assert(png, `no PNG result: ${JSON.stringify(ex.results.map((r) => r.formats()))}`)
    eq(Buffer.from(png.png, 'base64').subarray(1, 4).toString(), 'PNG', 'PNG signature')
  }],
  ['an error has name, value and traceback', async () => {
    const ex = await sbx.runCode('def f():\n    raise ValueError("bad value")\nf()')
    eq(ex.error?.name, 'ValueError', 'error name')
    eq(ex.error?.value, 'bad value', 'error value')
    const plain = ex.error.traceback.replace(/\x1b\[[0-9;]*m/g, '')
    assert(plain.includes('raise ValueError("bad value")') && plain.includes('----> 3 f()'), `traceback: ${plain}`)
  }],
  ['state across pause and connect', async () => {
    eq(await sbx.pause(), true, 'pause')
    eq((await sbx.getInfo()).state, 'paused', 'state after pause')
    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 1_800_000 })
    eq((await again.getInfo()).state, 'running', 'state after connect')
    eq((await again.runCode('x + 1', { timeoutMs: 300_000 })).text, '42', 'x + 1 after pause and resume')
    sbx = again
  }],
]

await run(`codeinterpreter-life (${process.env.E2B_RUNTIME || '?'})`, tests, async () => {
  const p50 = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)]
  if (timings.code.length) {
    const t = { create: timings.create, first: timings.first, code_p50: p50(timings.code), exec_p50: p50(timings.exec), n: timings.code.length }
    console.log(`timing: create ${t.create} ms, first runCode('1+1') ${t.first} ms, runCode('1+1') p50 ${t.code_p50} ms, ` +
      `commands.run('true') p50 ${t.exec_p50} ms, ratio ${(t.code_p50 / t.exec_p50).toFixed(2)} (n=${t.n})`)
    console.log('timing-json: ' + JSON.stringify(t))
  }
  if (sbx) await sbx.kill()
})
