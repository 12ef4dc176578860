// getMetrics as E2B answers it: a history of samples of the sandbox's life
// (one every 5 s, internal/e2bapi/history.go), filtered by {start, end},
// with the disk the sandbox's volume is charged (ns on btrfs) or its disk
// image holds (vm).
import { Sandbox } from 'e2b'
import { assert, eq, run, template, waitFor } from './lib.mjs'

const sbx = await Sandbox.create(template, { timeoutMs: 300_000 })
const MiB = 1 << 20

await run('metrics', [
  ['a history of samples with disk use', async () => {
    const info = await sbx.getInfo()
    const runtime = info.metadata['space.runtime']
    // The SDK's getInfo leaves out E2B's diskSizeMB: read it from the API.
    const detail = await (await fetch(`${process.env.E2B_API_URL}/sandboxes/${sbx.sandboxId}`, { headers: { 'X-API-Key': process.env.E2B_API_KEY } })).json()
    assert(detail.diskSizeMB > 0, `diskSizeMB ${detail.diskSizeMB}`)
    await waitFor(async () => (await sbx.getMetrics()).length >= 3, 'two history samples and the live one', 30_000)
    // 32 MiB written (and synced, so that it is charged at once).
    await sbx.commands.run('head -c 33554432 /dev/urandom > /home/user/blob && sync')
    await waitFor(async () => {
      const ms = await sbx.getMetrics()
      return ms.at(-1).diskUsed - ms[0].diskUsed >= 30 * MiB && ms.length >= 4
    }, 'the disk use to grow by the file in the history', 30_000)
    const ms = await sbx.getMetrics()
    for (const [i, m] of ms.entries()) {
      // ns: the volume's limit, disk_mib; vm: the disk image's size, the
      // template's plus 2 GiB.
      if (runtime === 'ns') eq(m.diskTotal, detail.diskSizeMB * MiB, `sample ${i} diskTotal`)
      else eq(m.diskTotal, ms[0].diskTotal, `sample ${i} diskTotal`)
      assert(m.diskUsed > 0 && m.diskUsed <= m.diskTotal, `sample ${i} diskUsed ${m.diskUsed}`)
      assert(m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, `sample ${i} cpuUsedPct ${m.cpuUsedPct}`)
      assert(m.memUsed > 0 && m.memUsed <= m.memTotal, `sample ${i} memUsed ${m.memUsed} of ${m.memTotal}`)
      assert(m.timestamp >= info.startedAt, `sample ${i} at ${m.timestamp.toISOString()}, before the start ${info.startedAt.toISOString()}`)
      if (i > 0) {
        const gap = m.timestamp - ms[i - 1].timestamp
        // History samples are 5 s apart (the rounds are a ticker's); the
        // last, taken now, may be closer.
        assert(gap > 0 && gap < 7_000, `samples ${i - 1} and ${i} are ${gap} ms apart`)
      }
    }
  }],
  ['{start, end} filter by time', async () => {
    const all = await sbx.getMetrics()
    const hist = all.slice(0, -1)
    assert(hist.length >= 3, `${hist.length} history samples`)
    const second = (d) => Math.floor(d.getTime() / 1000)
    // The window of one history sample's second holds that sample alone
    // (the SDK sends whole seconds).
    const one = hist[1]
    const got = await sbx.getMetrics({ start: new Date(second(one.timestamp) * 1000), end: new Date(second(one.timestamp) * 1000) })
    eq(got.length, 1, 'samples in one second')
    eq(got[0].timestamp.getTime(), one.timestamp.getTime(), 'the sample of that second')
    // From a sample on: it and the later ones, and the live one.
    const later = await sbx.getMetrics({ start: new Date(second(hist[1].timestamp) * 1000) })
    assert(later.length >= all.length - 1, `${later.length} samples from the second one, of ${all.length}`)
    eq(later[0].timestamp.getTime(), hist[1].timestamp.getTime(), 'first sample of the window')
    // Before the sandbox existed: nothing.
    eq((await sbx.getMetrics({ end: new Date(Date.now() - 3_600_000) })).length, 0, 'samples an hour ago')
  }],
], async () => {
  await sbx.kill()
})
