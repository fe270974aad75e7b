"""The process tier (issue 7, docs/process.md): `cordon run --tier process`, cordond's sandboxes of
that tier, calls in the warm interpreter, what one call leaves for the next (nothing), timeouts,
and what the confinement refuses."""
import glob
import json
import os
import time

import pytest

from cordonlib import all_procs, run

from cordon import CordonError, Sandbox

LEAK_TIMEOUT = 5.0

PROBE = r"""
import os, socket
out = {"uid": os.getuid(), "home": os.environ.get("HOME", "")}
def attempt(name, f):
    try:
        f()
        out[name] = "allowed"
    except OSError as e:
        out[name] = type(e).__name__
attempt("read_var", lambda: os.listdir("/var"))
attempt("read_proc", lambda: open("/proc/1/cmdline").read())
attempt("write_tmp", lambda: open("/tmp/cordon-process-probe", "w").write("x"))
attempt("write_usr", lambda: open("/usr/cordon-process-probe", "w").write("x"))
attempt("socket", lambda: socket.socket())
def unshare():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        raise OSError(ctypes.get_errno(), "unshare")
attempt("unshare", unshare)
attempt("write_home", lambda: open(os.path.join(os.environ["HOME"], "f"), "w").write("x"))
print(json.dumps(out))
"""


def test_run_confines_the_command():
    """Each refusal here is a layer of docs/process.md; "allowed" for any of them (a worker
    without Landlock, with the network filter missing, still root) fails this test."""
    r = run(["--tier", "process", "--", "python3", "-c", "import json\n" + PROBE])
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["uid"] >= 1000 and out["home"] == "/workspace", out
    for k in ("read_var", "read_proc", "write_usr", "socket", "unshare"):
        assert out[k] != "allowed", (k, out)
    # /tmp and /workspace are the sandbox's own (binds of its directory in its mount namespace)
    assert out["write_home"] == "allowed" and out["write_tmp"] == "allowed", out
    assert not os.path.exists("/tmp/cordon-process-probe")


def test_run_exit_status_and_network_open():
    assert run(["--tier", "process", "--", "sh", "-c", "exit 7"]).code == 7
    r = run(["--tier", "process", "--net", "open", "--", "python3", "-c", "import socket; socket.socket(); print('ok')"])
    assert r.code == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.parametrize("args,field", [
    (["--image", "/nonexistent-image"], "image"),
    (["--net", "allow=example.com"], "network"),
    (["--protect", "/workspace/x"], "protect"),  # names nothing
    (["--bind", "/etc:/data:ro"], "mounts"),  # outside /workspace
])
def test_run_refuses_what_the_tier_cannot_do(args, field):
    r = run(["--tier", "process"] + args + ["--", "true"])
    assert r.code == 125 and field in r.stderr, r.stderr


def test_call_result_output_input_and_error(daemon):
    with Sandbox.create(endpoint=daemon.endpoint, tier="process") as sb:
        c = sb.call("import sys\nprint('out')\nprint('err', file=sys.stderr)\ninput['a'] * 2", input={"a": 21})
        assert (c.result, c.stdout, c.stderr, c.error, c.timed_out) == (42, "out\n", "err\n", None, False)
        # the call's own time: at least its sleep, at most the round trip that carried it
        t0 = time.monotonic()
        c = sb.call("import time\ntime.sleep(0.3)\n7")
        wall_ms = (time.monotonic() - t0) * 1000
        assert c.result == 7 and 300 <= c.duration_ms <= wall_ms, (c.duration_ms, wall_ms)
        c = sb.call("def f():\n    raise ValueError('bad value')\nf()")
        assert c.error["type"] == "ValueError" and "bad value" in c.error["message"]
        assert "line 2" in c.error["traceback"] and c.result is None
        assert sb.call("object()").result.startswith("<object object")  # not JSON: its repr
        # exec and files work as in the other tiers; /workspace is the sandbox's directory
        sb.files.write("/workspace/data.txt", b"payload")
        r = sb.exec(["cat", "data.txt"])
        assert r.exit_code == 0 and r.stdout == "payload"
        assert sb.call("open('/workspace/data.txt').read()").result == "payload"


def test_consecutive_calls_share_no_state(daemon):
    """Each second call would see the first one's mark if the scrub (worker-server.py) missed it."""
    with Sandbox.create(endpoint=daemon.endpoint, tier="process") as sb:
        first = sb.call(
            "import os, json, builtins, sys, subprocess\n"
            "g_mark = 1\n"
            "os.environ['MARK'] = '1'\n"
            "json.dumps = None\n"
            "builtins.MARK = 1\n"
            "sys.path.append('/mark')\n"
            "open('mark.txt', 'w').write('x')\n"
            "p = subprocess.Popen(['sleep', '60'])\n"
            "p.pid")
        assert first.error is None, first.error
        pid = first.result
        second = sb.call(
            "import os, json, builtins, sys\n"
            "alive = True\n"
            "try:\n"
            "    os.kill(%d, 0)\n"
            "except ProcessLookupError:\n"
            "    alive = False\n"
            "['g_mark' in globals(), os.environ.get('MARK'), json.dumps is None, hasattr(builtins, 'MARK'),\n"
            " '/mark' in sys.path, os.path.exists('mark.txt'), alive]" % pid)
        assert second.error is None, second.error
        assert second.result == [False, None, False, False, False, False, False], second.result
        # The same without a child process: the server stays, so the scrub itself is what is tested.
        sb.call("import json, os\njson.loads = None\nos.environ['M2'] = 'x'\nopen('m2', 'w').write('y')\nq = 1")
        after = sb.call("import json, os\n[json.loads is None, 'M2' in os.environ, os.path.exists('m2'), 'q' in globals()]")
        assert after.result == [False, False, False, False], after.result


def test_timeout_kills_the_call_and_the_next_one_runs(daemon):
    with Sandbox.create(endpoint=daemon.endpoint, tier="process") as sb:
        t0 = time.monotonic()
        c = sb.call("import subprocess\nsubprocess.Popen(['sleep', '60'])\nwhile True: pass", timeout_s=0.5)
        assert c.timed_out and c.error["type"] == "TimeoutError"
        assert time.monotonic() - t0 < 5
        assert sb.call("1 + 1").result == 2
        # the killed call's child went with it
        r = sb.exec(["sh", "-c", "pgrep -x sleep || echo none"])
        assert r.stdout.strip() == "none", r.stdout


def test_call_refusals(daemon):
    with Sandbox.create(endpoint=daemon.endpoint, tier="process") as sb:
        for body, field in (({"code": 1}, "code"), ({"code": "1", "language": "ruby"}, "language"),
                            ({"code": "1", "timeout_s": -1}, "timeout_s"), ({"code": "1", "bogus": 1}, "bogus")):
            status, resp = daemon.http("POST", f"/v1/sandboxes/{sb.id}/call", body)
            assert status == 400 and resp["error"]["field"] == field, (body, resp)
    with Sandbox.create(endpoint=daemon.endpoint) as sb:
        with pytest.raises(CordonError) as e:
            sb.call("1")
        assert e.value.status == 400 and "tier" in str(e.value)
    for spec, field in (({"tier": "process", "image": "/srv"}, "image"),
                        ({"tier": "process", "network": {"mode": "allowlist", "allow": ["a.com"]}}, "network"),
                        ({"tier": "process", "mounts": [{"source": "/srv", "target": "/data"}]}, "mounts")):
        status, resp = daemon.http("POST", "/v1/sandboxes", spec)
        assert status == 400 and resp["error"]["field"] == field, resp


def test_sandboxes_cannot_read_each_other(daemon):
    """Landlock and the directories' modes: without either, B reads A's file (this test fails)."""
    with Sandbox.create(endpoint=daemon.endpoint, tier="process") as a, \
            Sandbox.create(endpoint=daemon.endpoint, tier="process") as b:
        a.files.write("/workspace/secret", b"s3cret")
        # where it is on the host (each sandbox sees only its own at /workspace)
        run_dir = os.environ.get("CORDON_RUN_DIR", "/run/cordon")
        path = glob.glob(os.path.join(run_dir, "process", "*", "work", "secret"))[0]
        c = b.call("open(%r).read()" % path)
        assert c.error and c.error["type"] == "PermissionError", c.result
        r = b.exec(["cat", path])
        assert r.exit_code != 0 and "s3cret" not in r.stdout


def test_ten_thousand_calls_leak_nothing(daemon):
    """No fd, process, mount or cgroup left after 10,000 calls (the autouse leak check, and
    cordond's own fds counted here). Named for run-all's sanitizer pass, which leaves out the long
    leak runs ("not leak"). cordond's stock of writable layers fills from its start, one fd each:
    counted full, or a fill that ends during the calls is taken for a leak."""
    with Sandbox.create(endpoint=daemon.endpoint, tier="process") as sb:
        daemon.wait_stock_full()
        fds0 = len(os.listdir(f"/proc/{daemon.proc.pid}/fd"))
        for i in range(10000):
            c = sb.call("input + 1", input=i)
            assert c.result == i + 1
        assert len(os.listdir(f"/proc/{daemon.proc.pid}/fd")) <= fds0 + 2


def test_a_pool_of_process_sandboxes_hands_over_warm_workers(shared_dir):
    """cordond's warm pool (per spec shape: image, runtime, limits) holds workers already cloned and
    confined: a create that matches is a hand-over, and its first call needs no fork."""
    from cordonlib import Daemon, wait_for
    spec = os.path.join(shared_dir, "pool.json")
    with open(spec, "w") as f:
        json.dump({"tier": "process", "limits": {"memory_mb": 256}}, f)
    d = Daemon(shared_dir, "--pool", f"2:{spec}")

    def pool_size():
        text = d.http("GET", "/metrics")[1].decode()
        return int(next(x for x in text.splitlines() if x.startswith("cordon_pool_size ")).split()[1])

    try:
        wait_for(lambda: pool_size() == 2, what="the pool to fill")
        workers = [p for p in all_procs() if p.ppid == d.proc.pid and p.comm == "cordon-worker" and p.uid != 0]
        assert len(workers) == 2, workers
        with Sandbox.create(endpoint=d.endpoint, tier="process", memory_mb=256, labels={"k": "v"}) as sb:
            assert "handed_over" in [e["type"] for e in sb.events()]
            assert sb.call("input * 2", input=21).result == 42
        wait_for(lambda: pool_size() == 2, what="the pool to refill")
    finally:
        assert d.stop() == 0


def test_memory_and_pids_limits_hold_in_calls_and_count_as_violations(daemon):
    with Sandbox.create(endpoint=daemon.endpoint, tier="process", memory_mb=96, pids=24) as sb:
        c = sb.call("b = bytearray(400 << 20)\nlen(b)")
        assert c.error and c.error["type"] in ("WorkerDied", "MemoryError"), c.error
        assert sb.call("1 + 1").result == 2  # a fresh interpreter took over
        r = sb.exec(["sh", "-c", "for i in $(seq 1 60); do sleep 2 & done; wait"], timeout_s=60)
        v = sb.violations()["counts"]
        assert v["pids"] >= 1 and v["oom"] + (c.error["type"] == "MemoryError") >= 1, v
