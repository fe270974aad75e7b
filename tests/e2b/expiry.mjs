// A sandbox's E2B lifetime (tests/integration/test_e2b.py): created with a short timeoutMs, reached
// from a second Node process (second.mjs) while it runs, then gone when its time is up; each
// outcome printed in one JSON object.
import { execFileSync } from 'node:child_process'
import { Sandbox } from 'e2b'

const out = {}
const errName = async (f) => {
  try { await f(); return null } catch (e) { return { name: e.constructor.name, message: e.message } }
}
const sbx = await Sandbox.create({ timeoutMs: 4000 })
await sbx.files.write('/tmp/from-first', 'first')
out.second = JSON.parse(execFileSync('node', ['second.mjs', sbx.sandboxId], { encoding: 'utf8' }).trim())
out.runningBefore = await sbx.isRunning()
await new Promise((resolve) => setTimeout(resolve, 6000))
out.runningAfter = await sbx.isRunning()
out.runAfter = await errName(() => sbx.commands.run('true'))
out.killAfter = await Sandbox.kill(sbx.sandboxId)
out.connectAfter = await errName(() => Sandbox.connect(sbx.sandboxId))
out.id = sbx.sandboxId
console.log(JSON.stringify(out))
