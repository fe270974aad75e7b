#!/usr/bin/python3
"""An OpenHands-style episode, end to end, through cordon's Python SDK.

    python3 examples/openhands_episode.py [--socket PATH] [--tier container]

The phases of an RL coding task:
  setup     a sandbox whose network allows one mirror; the task's repository uploaded as a directory
  agent     the agent's tools: a shell session whose cd/export carry over, an editor write, a background
            dev server reached through cordond's proxy path, an interactive terminal (PTY); the
            network is closed for this phase
  verify    the grader runs as a verifier step (alone, after the agent's processes are ended)
It prints one line per step with its time, and exits 1 if any step does not do what it should.
The network addresses are TEST-NET ones (203.0.113.0/24): nothing leaves this machine.
"""

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from cordon import Endpoint, Sandbox  # noqa: E402

REPO = {
    "calc/__init__.py": "",
    "calc/ops.py": "def add(a, b):\n    return a - b  # the bug the agent fixes\n",
    "tests/test_ops.py": "from calc.ops import add\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    "run_tests.py": ("import sys, traceback\nsys.path.insert(0, '.')\nfrom tests import test_ops\n"
                     "try:\n    test_ops.test_add()\n    print('PASS')\nexcept AssertionError:\n"
                     "    print('FAIL')\n    sys.exit(1)\n"),
    "tests/__init__.py": "",
}


def step(name, fn):
    t = time.monotonic()
    ok, detail = fn()
    print(f"{'ok  ' if ok else 'FAIL'} {name:<44} {(time.monotonic() - t) * 1e3:8.1f} ms  {detail}")
    if not ok:
        raise SystemExit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", default=None)
    ap.add_argument("--tier", default="container")
    args = ap.parse_args()
    ep = Endpoint(socket_path=args.socket, timeout=120)
    with tempfile.TemporaryDirectory() as local:
        for path, text in REPO.items():
            os.makedirs(os.path.dirname(os.path.join(local, path)) or local, exist_ok=True)
            with open(os.path.join(local, path), "w") as f:
                f.write(text)
        with Sandbox.create(endpoint=ep, tier=args.tier, memory_mb=512, workdir="/workspace",
                            network={"mode": "allowlist", "allow": ["203.0.113.10"]},
                            labels={"episode": "demo"}) as sb:
            # ---- setup
            step("setup: upload the repository (one tar)", lambda: (
                (r := sb.files.upload_dir(local, "/workspace/repo"))["entries"] >= len(REPO), json.dumps(r)))
            step("setup: network allows the mirror only", lambda: (
                sb.info()["spec"]["network"]["allow"] == ["203.0.113.10"], "allowlist 203.0.113.10"))
            # ---- agent
            step("agent: network closed for the agent phase", lambda: (
                (r := sb.set_network("allowlist", []))["allow"] == [], f"generation {r['generation']}"))
            with sb.session() as sh:
                step("agent: session cd + export", lambda: (
                    sh.run("cd /workspace/repo && export PYTHONDONTWRITEBYTECODE=1").exit_code == 0, sh.id))
                step("agent: session sees both; tests fail first", lambda: (
                    (r := sh.run("pwd; python3 run_tests.py")).exit_code == 1 and
                    r.stdout == "/workspace/repo\nFAIL\n", repr(r.stdout)))
                step("agent: a command that hangs is interrupted", lambda: (
                    (r := sh.run("python3 -c 'import time; time.sleep(100)'", timeout_s=1)).timed_out and
                    sh.run("pwd").stdout == "/workspace/repo\n", "timed out; session kept its cwd"))
                step("agent: edit the file (files API)", lambda: (
                    sb.files.write("/workspace/repo/calc/ops.py",
                                   b"def add(a, b):\n    return a + b\n") is None or True, "calc/ops.py"))
                step("agent: tests pass after the edit", lambda: (
                    (r := sh.run("python3 run_tests.py")).exit_code == 0, r.stdout.strip()))
            server = sb.start(["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"],
                              cwd="/workspace/repo")

            def reach_server():
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    status, _, body = sb.port_request(8000, "/calc/ops.py")
                    if status == 200:
                        return b"a + b" in body, f"pid {server.pid}, GET /calc/ops.py → {status}"
                    time.sleep(0.2)
                return False, "the dev server did not answer"
            step("agent: background dev server via the proxy path", reach_server)

            def terminal():
                p = sb.start(["bash", "--norc", "-i"], pty=(30, 100))
                p.send_stdin("stty size; echo $((6*7))\n")
                seen = ""
                deadline = time.monotonic() + 30
                for ev in p.follow():
                    seen += ev.get("data", "")
                    if "42" in seen and "30 100" in seen or time.monotonic() > deadline:
                        break
                p.send_stdin("exit 0\n")
                info = p.wait(timeout=30)
                return "30 100" in seen and "42" in seen and info["exit_code"] == 0, "pty 30x100, exit 0"
            step("agent: interactive terminal (PTY)", terminal)
            # ---- verify
            step("verify: the grader as a verifier step", lambda: (
                (r := sb.exec(["python3", "run_tests.py"], cwd="/workspace/repo", verifier=True)).exit_code == 0
                and r.stdout == "PASS\n", r.stdout.strip()))
            step("verify: the dev server was ended before it", lambda: (
                not server.refresh()["running"], "agent processes ended by the verifier step"))
            step("verify: no violations in the episode", lambda: (
                (v := sb.violations())["counts"] and not any(v["counts"].values()), json.dumps(v["counts"])))
    print("episode: all steps passed")


if __name__ == "__main__":
    main()
