// E2B's default user in a sandbox of the base template (tests/integration/test_e2b.py): commands
// and file operations run as `user` (uid 1000, home /home/user) unless a call names another, as
// against E2B's envd; each outcome printed in one JSON object.
import { Sandbox } from 'e2b'

const out = {}
const errName = async (f) => {
  try { await f(); return null } catch (e) { return { name: e.constructor.name, message: e.message } }
}
const sbx = await Sandbox.create()
const sh = async (cmd, opts) => {
  try { return (await sbx.commands.run(cmd, opts)).stdout } catch (e) { return `exit ${e.exitCode}: ${e.stderr}` }
}
out.who = await sh('whoami; id -u; id -g; echo $HOME; pwd; stat -c %U:%G .')
out.root = await sh('whoami; echo $HOME', { user: 'root' })
await sbx.files.write('mine.txt', 'by the SDK')
out.mine = await sh('stat -c %U:%G:%a mine.txt && echo more >> mine.txt && cat mine.txt')
out.mkdir = await sbx.files.makeDir('a/b')
out.dirs = await sh('stat -c %U:%G a a/b')
const info = await sbx.files.getInfo('mine.txt')
out.info = [info.owner, info.group]
out.listed = (await sbx.files.list('/', { depth: 1 })).filter((e) => ['root', 'home', 'tmp'].includes(e.name))
  .map((e) => [e.name, e.owner, e.group])
const moved = await sbx.files.rename('a/b', 'a/c')
out.moved = [moved.name, moved.owner, moved.group]
await sbx.commands.run('touch /tmp/nobody.txt', { user: '4321' }) // a uid with no name
const nobody = await sbx.files.getInfo('/tmp/nobody.txt')
out.numeric = [nobody.owner, nobody.group]
await sbx.files.write([{ path: 'm/1.txt', data: 'one' }, { path: 'm/2.txt', data: 'two' }])
out.multi = await sh('stat -c %U m m/1.txt m/2.txt')
out.etc = await errName(() => sbx.files.write('/etc/cordon-e2b', 'no'))
out.rootHome = await errName(() => sbx.files.list('/root'))
await sbx.files.write('/root/r.txt', 'root', { user: 'root' })
out.rootWrite = await sh('stat -c %U /root/r.txt', { user: 'root' })
out.rootRead = await errName(() => sbx.files.read('/root/r.txt'))
out.rootReadAsRoot = await sbx.files.read('/root/r.txt', { user: 'root' })
out.unknown = await errName(() => sbx.files.write('x.txt', 'x', { user: 'nosuchuser' }))
out.unknownCmd = await errName(() => sbx.commands.run('true', { user: 'nosuchuser' }))
out.id = sbx.sandboxId
await sbx.kill()
console.log(JSON.stringify(out))
