// bench/e2b-cycle.mjs — the E2B SDK's side of bench/run-e2b: CLIENTS concurrent loops of
// Sandbox.create() → commands.run('true') → kill() for ROUND_S seconds against the cordond that
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY name. The SDK is tests/e2b's (E2B_MODULE: its
// dist/index.mjs). Prints one JSON object: cycles, errors, the first error, elapsed_ms, cpu_ms (this
// process's while it looped), and each cycle's times (cycle, create, run, kill) in ms.
const { Sandbox } = await import(process.env.E2B_MODULE)
const [clients, seconds] = process.argv.slice(2).map(Number)
const out = { cycles: 0, errors: 0, first_error: null, cycle: [], create: [], run: [], kill: [] }
const t0 = performance.now()
const cpu0 = process.cpuUsage() // the loops' CPU, not Node's start-up
const deadline = t0 + seconds * 1000
async function loop () {
  while (performance.now() < deadline) {
    const a = performance.now()
    try {
      const sbx = await Sandbox.create()
      const b = performance.now()
      const r = await sbx.commands.run('true')
      const c = performance.now()
      if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode}`)
      if (!(await sbx.kill())) throw new Error('kill found no sandbox')
      const d = performance.now()
      out.cycles++
      out.cycle.push(d - a)
      out.create.push(b - a)
      out.run.push(c - b)
      out.kill.push(d - c)
    } catch (e) {
      out.errors++
      out.first_error ??= String(e && e.stack ? e.stack : e)
    }
  }
}
await Promise.all(Array.from({ length: clients }, loop))
out.elapsed_ms = performance.now() - t0
const cpu = process.cpuUsage(cpu0)
out.cpu_ms = (cpu.user + cpu.system) / 1000
console.log(JSON.stringify(out))
