// Shared helpers of the E2B compatibility scripts: a tiny test runner and
// assertions. The scripts use the published `e2b` package unmodified; the
// Go test (e2b_test.go) sets E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY.
import { createHash } from 'node:crypto'

// template is the SPACE template the scripts create sandboxes from.
export const template = process.env.E2B_TEMPLATE || 'minimal'

export function assert(cond, msg) {
  if (!cond) throw new Error('assertion failed: ' + msg)
}

export function eq(got, want, what) {
  if (got !== want) throw new Error(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`)
}

// rejects runs fn and checks that it throws an instance of cls.
export async function rejects(fn, cls, what) {
  try {
    await fn()
  } catch (e) {
    if (!(e instanceof cls)) throw new Error(`${what}: threw ${e?.constructor?.name}: ${e?.message}, want ${cls.name}`)
    return e
  }
  throw new Error(`${what}: did not throw, want ${cls.name}`)
}

// waitFor polls cond until it is true or timeoutMs passes.
export async function waitFor(cond, what, timeoutMs = 10000) {
  const end = Date.now() + timeoutMs
  while (Date.now() < end) {
    if (await cond()) return
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error('timed out waiting for ' + what)
}

export function sha256(buf) {
  return createHash('sha256').update(buf).digest('hex')
}

// run runs the named tests in order, printing one line each and a summary,
// and exits non-zero when one failed. cleanup runs at the end whatever
// happened.
export async function run(suite, tests, cleanup = async () => {}) {
  let passed = 0
  let failed = 0
  for (const [name, fn] of tests) {
    const start = Date.now()
    try {
      await fn()
      passed++
      console.log(`ok   ${suite}/${name} (${Date.now() - start} ms)`)
    } catch (e) {
      failed++
      console.log(`FAIL ${suite}/${name} (${Date.now() - start} ms): ${e?.stack || e}`)
    }
  }
  try {
    await cleanup()
  } catch (e) {
    console.log(`cleanup: ${e?.stack || e}`)
  }
  console.log(`${suite}: ${passed} passed, ${failed} failed`)
  process.exit(failed ? 1 : 0)
}
