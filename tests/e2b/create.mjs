// One sandbox made through the E2B SDK and left running (tests/integration/test_e2b.py): its id.
import { Sandbox } from 'e2b'

const s = await Sandbox.create({ metadata: { job: 'j2' }, envs: { FOO: 'bar baz' }, timeoutMs: 90_000 })
console.log(JSON.stringify({ id: s.sandboxId }))
