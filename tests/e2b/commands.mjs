// The E2B SDK's commands against cordond (tests/integration/test_e2b.py): each outcome printed in
// one JSON object.
import { Sandbox } from 'e2b'

const out = {}
const errName = async (f) => {
  try { await f(); return null } catch (e) { return { name: e.constructor.name, exitCode: e.exitCode, message: e.message } }
}
const sbx = await Sandbox.create({ envs: { SANDBOX_WIDE: 'yes' } })
const r = await sbx.commands.run('echo hi; echo err >&2; echo $SANDBOX_WIDE')
out.run = { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr }
out.exit = await errName(() => sbx.commands.run('echo partial; exit 3'))
out.envcwd = (await sbx.commands.run('echo $X; pwd', { envs: { X: 'y' }, cwd: '/tmp' })).stdout
const h = await sbx.commands.run('sleep 60', { background: true, timeoutMs: 0 })
out.bgPid = h.pid
out.list = (await sbx.commands.list()).map((p) => ({ pid: p.pid, cmd: p.cmd, args: p.args }))
out.killed = await sbx.commands.kill(h.pid)
out.killedEnd = await errName(() => h.wait()) // its end: the kill is done, and known
out.killedAgain = await sbx.commands.kill(h.pid)
const s = await sbx.commands.run('head -c 5; echo', { background: true, stdin: true })
await sbx.commands.sendStdin(s.pid, 'abcde')
out.stdin = (await s.wait()).stdout
const chunks = []
await sbx.commands.run('for i in 1 2 3; do echo $i; sleep 0.2; done', { onStdout: (d) => chunks.push(d) })
out.chunks = chunks
out.timeout = await errName(() => sbx.commands.run('sleep 30', { timeoutMs: 1000 }))
const bg = await sbx.commands.run('sleep 2; echo done', { background: true })
await bg.disconnect()
const again = await sbx.commands.connect(bg.pid)
out.reconnect = (await again.wait()).stdout
const gone = await sbx.commands.run('sleep 30', { background: true, timeoutMs: 1500 })
await gone.disconnect()
await new Promise((resolve) => setTimeout(resolve, 4000))
out.deadlineKept = (await sbx.commands.list()).some((p) => p.pid === gone.pid)
out.connectGone = await errName(() => sbx.commands.connect(999999))
out.sendToGone = await errName(() => sbx.commands.sendStdin(999999, 'x'))
let ptyOut = ''
const t = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { ptyOut += new TextDecoder().decode(d) } })
await sbx.pty.resize(t.pid, { cols: 100, rows: 30 })
await sbx.pty.sendInput(t.pid, new TextEncoder().encode('stty size; exit 4\n'))
out.ptyExit = await errName(() => t.wait())
out.pty = ptyOut
out.id = sbx.sandboxId
await sbx.kill()
console.log(JSON.stringify(out))
