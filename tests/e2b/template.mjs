// A sandbox of one of cordond's templates (tests/integration/test_e2b.py): its template's network
// allowlist and limits, as an E2B script meets them; each outcome printed in one JSON object.
import { Sandbox } from 'e2b'

const out = {}
const sbx = await Sandbox.create(process.env.TEMPLATE)
const info = await sbx.getInfo()
out.info = { templateId: info.templateId, cpuCount: info.cpuCount, memoryMB: info.memoryMB }
const run = async (cmd) => {
  try { const r = await sbx.commands.run(cmd); return { exitCode: r.exitCode, stdout: r.stdout } } catch (e) {
    return { exitCode: e.exitCode, stdout: e.stdout, stderr: e.stderr }
  }
}
out.home = await run('pwd; echo $HOME')
if (process.env.NET) {
  out.allowed = await run('curl -sS -m 10 http://pypi.test/')
  out.refused = await run('curl -sS -m 10 http://evil.test/')
}
if (process.env.FILES) {
  out.uname = await run('uname -r')
  await sbx.files.write('notes/a.txt', 'in the guest')
  out.read = await sbx.files.read('notes/a.txt')
  out.list = (await sbx.files.list('notes')).map((e) => e.path)
  out.cat = await run('cat notes/a.txt')
  out.owner = await run('whoami; stat -c %U . notes notes/a.txt')
  const entry = await sbx.files.getInfo('notes/a.txt')
  out.entry = [entry.owner, entry.group]
  try { await sbx.files.write('/root/cordon-e2b', 'no'); out.rootDir = 'written' } catch (e) { out.rootDir = e.message }
}
out.id = sbx.sandboxId
if (!process.env.KEEP) out.killed = await sbx.kill()
console.log(JSON.stringify(out))
