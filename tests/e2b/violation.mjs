// A watched denial made through the E2B SDK (tests/integration/test_e2b.py): the sandbox is left
// running for the test to read its violations through cordon's own API.
import { Sandbox } from 'e2b'

const s = await Sandbox.create()
let exitCode = 0
try {
  await s.commands.run('mount -t tmpfs none /mnt')
} catch (e) {
  exitCode = e.exitCode
}
console.log(JSON.stringify({ id: s.sandboxId, exitCode }))
