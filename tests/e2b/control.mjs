// The E2B SDK's control plane against cordond (tests/integration/test_e2b.py): each step's outcome
// printed as one JSON object. E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL come from the test.
import { Sandbox } from 'e2b'

const out = {}
const errName = async (f) => {
  try { await f(); return null } catch (e) { return `${e.constructor.name}: ${e.message}` }
}
const sbx = await Sandbox.create({ metadata: { job: 'j1', 'a b': 'c&d' }, envs: { FOO: 'bar' }, timeoutMs: 120_000 })
out.id = sbx.sandboxId
out.running = await sbx.isRunning()
const info = await sbx.getInfo()
out.info = { templateId: info.templateId, metadata: info.metadata, state: info.state, cpuCount: info.cpuCount,
  memoryMB: info.memoryMB, envdVersion: info.envdVersion, ends: info.endAt.getTime() - info.startedAt.getTime() }
out.listed = (await Sandbox.list({ query: { metadata: { 'a b': 'c&d' } } }).nextItems()).map((s) => s.sandboxId)
out.listedNone = (await Sandbox.list({ query: { metadata: { job: 'other' } } }).nextItems()).length
await sbx.setTimeout(30_000)
const info2 = await sbx.getInfo()
out.endsAfter = info2.endAt.getTime() - Date.now()
out.connected = (await Sandbox.connect(sbx.sandboxId)).sandboxId
await sbx.commands.run('head -c 20000000 /dev/zero | sha256sum > /dev/null')
out.metrics = (await sbx.getMetrics()).map((m) => ({
  age: Date.now() - m.timestamp.getTime(), cpuUsedPct: m.cpuUsedPct, cpuCount: m.cpuCount, memUsed: m.memUsed,
  memTotal: m.memTotal, diskUsed: m.diskUsed, diskTotal: m.diskTotal,
}))
out.metricsPast = await sbx.getMetrics({ start: new Date(Date.now() - 3600e3), end: new Date(Date.now() - 1800e3) })
out.killed = await sbx.kill()
out.killedAgain = await Sandbox.kill(sbx.sandboxId)
out.runningAfter = await sbx.isRunning()
out.connectMissing = await errName(() => Sandbox.connect(sbx.sandboxId))
out.badTemplate = await errName(() => Sandbox.create('no-such-template'))
out.badKey = await errName(() => Sandbox.create({ apiKey: 'wrong' }))
console.log(JSON.stringify(out))
