// E2B's pause and resume against cordond (tests/integration/test_e2b.py): each outcome printed in
// one JSON object.
import { Sandbox } from 'e2b'

const out = {}
const errName = async (f) => {
  try { await f(); return null } catch (e) { return { name: e.constructor.name, message: e.message } }
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const sbx = await Sandbox.create({ metadata: { run: 'p1' } })
await sbx.commands.run('while :; do echo x >> /tmp/count; sleep 0.05; done', { background: true, timeoutMs: 0 })
await sleep(500)
const count = async (s) => Number((await s.commands.run('wc -l < /tmp/count')).stdout.trim())
const before = await count(sbx)
out.paused = await sbx.pause()
out.pausedAgain = await Sandbox.pause(sbx.sandboxId)
out.state = (await sbx.getInfo()).state
out.listedPaused = (await Sandbox.list({ query: { state: ['paused'], metadata: { run: 'p1' } } }).nextItems()).map((s) => s.sandboxId)
out.listedRunning = (await Sandbox.list({ query: { state: ['running'], metadata: { run: 'p1' } } }).nextItems()).length
out.isRunning = await sbx.isRunning()
out.runWhilePaused = await errName(() => sbx.commands.run('true'))
await sleep(2000)
const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 120_000 })
out.frozen = (await count(again)) - before
await sleep(1000)
out.after = (await count(again)) - before - out.frozen
out.endsIn = (new Date((await again.getInfo()).endAt).getTime() - Date.now()) / 1000
out.killed = await again.kill()
out.pauseGone = await errName(() => Sandbox.pause(sbx.sandboxId))
console.log(JSON.stringify(out))
