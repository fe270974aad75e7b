// Through E2B's files calls, symlinks an agent left into a sandbox's protected paths
// (tests/integration/test_e2b.py): each attempt's error printed in one JSON object.
import { Sandbox } from 'e2b'

const out = {}
const errName = async (f) => {
  try { await f(); return null } catch (e) { return { name: e.constructor.name, message: e.message } }
}
const sbx = await Sandbox.connect(process.env.SANDBOX_ID)
out.read = await errName(() => sbx.files.read('/workspace/result.txt'))
out.write = await errName(() => sbx.files.write('/workspace/out.py', 'forged'))
out.list = await errName(() => sbx.files.list('/workspace/t'))
out.info = await errName(() => sbx.files.getInfo('/workspace/t/test_hidden.py'))
out.direct = await sbx.files.read('/workspace/answer.key') // the operator's own: trusted
console.log(JSON.stringify(out))
