// A second client of a sandbox another process made (expiry.mjs): Sandbox.connect by id alone.
import { Sandbox } from 'e2b'

const sbx = await Sandbox.connect(process.argv[2])
const r = await sbx.commands.run('cat /tmp/from-first; echo -n " seen"')
console.log(JSON.stringify({ id: sbx.sandboxId, stdout: r.stdout, listed: (await Sandbox.list().nextItems()).some((s) => s.sandboxId === process.argv[2]) }))
