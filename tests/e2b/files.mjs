// The E2B SDK's files calls against cordond (tests/integration/test_e2b.py): each outcome printed in
// one JSON object.
import { Sandbox } from 'e2b'

const out = {}
const errName = async (f) => {
  try { await f(); return null } catch (e) { return { name: e.constructor.name, message: e.message } }
}
const sbx = await Sandbox.create()
const f = sbx.files
out.pwd = (await sbx.commands.run('pwd')).stdout.trim()
out.write = await f.write('hello.txt', 'hi there')
out.read = await f.read('/home/user/hello.txt')
out.readByShell = (await sbx.commands.run('cat ~/hello.txt; echo; cat /home/user/hello.txt')).stdout
const bytes = new Uint8Array([0, 1, 2, 250, 255, 10])
await f.write('/tmp/bin.dat', bytes.buffer)
out.bytes = Array.from(await f.read('/tmp/bin.dat', { format: 'bytes' }))
out.empty = await f.write('/tmp/empty', '')
out.emptyRead = await f.read('/tmp/empty')
out.multi = await f.write([
  { path: '/tmp/m/a.txt', data: 'A' },
  { path: 'sub/b.txt', data: 'BB' },
  { path: '/tmp/m/c "q".txt', data: new Blob(['C']) },
])
out.multiRead = (await sbx.commands.run('cat /tmp/m/a.txt ~/sub/b.txt "/tmp/m/c \\"q\\".txt"')).stdout
out.octet = await f.write('/tmp/o.txt', 'octet', { useOctetStream: true })
out.gzip = await f.write('/tmp/g.txt', 'zipped '.repeat(1000), { gzip: true })
out.gzipRead = (await f.read('/tmp/g.txt')).length
out.stream = await f.write('/tmp/s.txt', new ReadableStream({
  start(c) { c.enqueue(new TextEncoder().encode('streamed')); c.close() },
}))
out.streamRead = await f.read('/tmp/s.txt')
out.list = (await f.list('/tmp/m')).map((e) => ({ name: e.name, type: e.type, path: e.path, size: e.size }))
await f.makeDir('/tmp/m/d/e')
await f.write('/tmp/m/d/e/deep.txt', 'x')
out.listDeep = (await f.list('/tmp/m', { depth: 3 })).map((e) => e.path).sort()
out.listFile = await errName(() => f.list('/tmp/m/a.txt'))
out.listMissing = await errName(() => f.list('/nonexistent'))
out.exists = await f.exists('/tmp/m/a.txt')
out.existsNot = await f.exists('/tmp/m/zzz')
const info = await f.getInfo('/tmp/m/a.txt')
out.info = { name: info.name, type: info.type, path: info.path, size: info.size, mode: info.mode,
  permissions: info.permissions, mtimeAge: Date.now() - info.modifiedTime.getTime() }
await sbx.commands.run('ln -s /tmp/m/a.txt /tmp/link')
const li = await f.getInfo('/tmp/link')
out.link = { type: li.type, target: li.symlinkTarget }
out.made = await f.makeDir('/tmp/newdir')
out.madeAgain = await f.makeDir('/tmp/newdir')
out.makeOnFile = await errName(() => f.makeDir('/tmp/m/a.txt'))
const moved = await f.rename('/tmp/m/a.txt', '/tmp/moved/a2.txt')
out.moved = { name: moved.name, path: moved.path, type: moved.type }
out.movedOld = await f.exists('/tmp/m/a.txt')
await f.remove('/tmp/m')
out.removed = await f.exists('/tmp/m')
out.removeMissing = await errName(() => f.remove('/tmp/never'))
out.readMissing = await errName(() => f.read('/tmp/never'))
out.readDir = await errName(() => f.read('/tmp'))
out.metadata = await errName(() => f.write('/tmp/meta', 'x', { metadata: { k: 'v' } }))
// Watching: the changes made by a command come as events, named relative to the directory.
await f.makeDir('/tmp/w')
const events = []
const handle = await f.watchDir('/tmp/w', (e) => { events.push({ name: e.name, type: e.type }) })
await sbx.commands.run('echo 1 > /tmp/w/new.txt; mkdir /tmp/w/sub; mv /tmp/w/new.txt /tmp/w/renamed.txt; chmod 600 /tmp/w/renamed.txt; rm /tmp/w/renamed.txt')
for (let i = 0; i < 50 && !events.some((e) => e.type === 'remove'); i++)
  await new Promise((resolve) => setTimeout(resolve, 100))
await handle.stop()
out.events = events
const recursive = []
const h2 = await f.watchDir('/tmp/w', (e) => { recursive.push({ name: e.name, type: e.type }) }, { recursive: true })
await sbx.commands.run('echo 2 > /tmp/w/sub/inner.txt')
for (let i = 0; i < 50 && !recursive.some((e) => e.name === 'sub/inner.txt'); i++)
  await new Promise((resolve) => setTimeout(resolve, 100))
await h2.stop()
out.recursive = recursive
out.watchMissing = await errName(() => f.watchDir('/tmp/nowhere', () => {}))
out.id = sbx.sandboxId
await sbx.kill()
console.log(JSON.stringify(out))
