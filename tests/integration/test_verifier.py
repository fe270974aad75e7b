"""The verifier step against an agent that prepares for it (issue 18, items 2, 3, 6 and 15).

A verifier step (exec with "verifier") may read the protected paths. Whatever the agent left
for it is an attack on the grade: code the verifier's tools import (a .pth in the user site, a
global git config, BASH_ENV/PYTHONPATH pointing at its files, a conftest.py), a protected
directory moved aside so that the verifier runs the agent's copy, a signal held for the next
command, an inotify watch that tells which protected files the harness opens.

Each test here failed before its fix; what it saw then is in its docstring."""

import os
import time

import pytest

import cordonlib
from cordonlib import Daemon
from cordon import Sandbox, CordonError, ServerError

SECRET = "the-answer-is-42"
HIDDEN = "from solution import solve\n\ndef test_hidden():\n    assert solve() == 42\n"
SPEC = dict(protect=["/workspace/answer.key", "/workspace/repo/tests/**"])


@pytest.fixture
def ws(shared_dir):
    """/workspace (a host directory, bound read-write): an answer key and hidden tests (protected),
    and the agent's repository, whose solution is wrong."""
    w = os.path.join(shared_dir, "ws")
    os.makedirs(os.path.join(w, "repo", "tests"))
    with open(os.path.join(w, "answer.key"), "w") as f:
        f.write(SECRET)
    with open(os.path.join(w, "repo", "tests", "test_hidden.py"), "w") as f:
        f.write(HIDDEN)
    with open(os.path.join(w, "repo", "solution.py"), "w") as f:
        f.write("def solve():\n    return 41\n")
    for d, _, files in os.walk(w):
        os.chmod(d, 0o777)
        for n in files:
            os.chmod(os.path.join(d, n), 0o666)
    return w


def intact(w):
    with open(os.path.join(w, "answer.key")) as f:
        assert f.read() == SECRET
    with open(os.path.join(w, "repo", "tests", "test_hidden.py")) as f:
        assert f.read() == HIDDEN


def sandbox(d, ws, tier, **kw):
    return Sandbox.create(endpoint=d.endpoint, tier=tier,
                          **{"mounts": [{"source": ws, "target": "/workspace"}], **SPEC, **kw})


def loot(ws):
    """What the agent's plants copied out while the verifier ran."""
    found = {}
    for n in sorted(os.listdir(ws)):
        if n.startswith("loot"):
            with open(os.path.join(ws, n), errors="replace") as f:
                found[n] = f.read()
    return found


# ---- item 6: a signal sent to init is for nobody else

# p is init's pid as the command sees it (1 in a container or a guest, the worker or the VM's agent
# elsewhere): the command's parent.
SEND_LATER = "p=$PPID; (sleep 0.3; kill -USR1 $p) >/dev/null 2>&1 </dev/null &"


def test_a_signal_to_init_reaches_no_command(shared_dir, ws, tier):
    """Seen failing before the fix (every tier): the command running when the signal came died of
    it (exit 138, "survived" missing); and, run by hand past that assertion, a signal sent while
    nothing ran was held and delivered to the next command (process) and to the verifier step
    (container, process): exit 138."""
    d = Daemon(shared_dir)
    try:
        sb = sandbox(d, ws, tier)
        r = sb.exec(SEND_LATER + " sleep 1.5; echo survived")
        assert (r.exit_code, r.stdout) == (0, "survived\n"), r
        assert sb.exec(SEND_LATER).exit_code == 0
        time.sleep(1.5)  # nothing runs when it arrives
        r = sb.exec(["true"])
        assert r.exit_code == 0, r
        assert sb.exec(SEND_LATER).exit_code == 0
        time.sleep(1.5)
        r = sb.exec(["cat", "/workspace/answer.key"], verifier=True)
        assert (r.exit_code, r.stdout) == (0, SECRET), r
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()


# ---- item 3: a protected directory stays where it was

MOVE_ASIDE = ("mv /workspace/repo /workspace/.orig && mkdir -p /workspace/repo/tests && "
              "printf 'def test_hidden():\\n    pass\\n' > /workspace/repo/tests/test_hidden.py && echo moved")


def test_a_protected_directory_cannot_be_moved_aside(shared_dir, ws, tier):
    """Seen failing before the fix (every tier): `moved` printed, exit 0 — the host's repo/ renamed
    to .orig and the agent's empty test in its place, which the verifier then ran; no violation."""
    d = Daemon(shared_dir)
    try:
        sb = sandbox(d, ws, tier)
        for cmd in [MOVE_ASIDE, "python3 -c 'import os; os.rename(\"/workspace/repo\", \"/workspace/x\")'",
                    "rmdir /workspace/repo", "mv /workspace/repo/tests /workspace/t2"]:
            r = sb.exec(["sh", "-c", cmd])
            assert r.exit_code != 0 and "moved" not in r.stdout, (cmd, r)
        # (mv falls back to copying when a rename fails: t2 may be there, without what is protected)
        assert not {".orig", "x"} & set(os.listdir(ws)), os.listdir(ws)
        intact(ws)
        r = sb.exec(["cat", "/workspace/repo/tests/test_hidden.py"], verifier=True)
        assert (r.exit_code, r.stdout) == (0, HIDDEN), r
        if tier in ("container", "process"):  # a guest refuses the rename without a report
            kinds = [e["kind"] for e in sb.events() if e["type"] == "violation"]
            assert kinds.count("protect") >= 2, kinds
        sb.kill()
        # kill mode: the attempt ends the sandbox (where it is reported), or fails
        sb = sandbox(d, ws, tier, on_violation="kill")
        try:
            r = sb.exec(["sh", "-c", MOVE_ASIDE])
            assert r.exit_code != 0 and tier not in ("container", "process"), r
        except ServerError:
            info = sb.info()
            assert info["exit_reason"] == "killed on violation: protect", info
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()
    intact(ws)


@pytest.mark.parametrize("tier", ["container", "process"])
def test_a_verifier_step_refuses_a_moved_protected_path(shared_dir, ws, tier):
    """The rename comes from outside this sandbox (the host, or another sandbox that binds the same
    directory): the verifier step sees that the protected mount is not at its path any more.
    Seen failing before the fix: the step ran the agent's stand-in (exit 0, its output)."""
    d = Daemon(shared_dir)
    try:
        sb = sandbox(d, ws, tier)
        os.rename(os.path.join(ws, "repo"), os.path.join(ws, "moved"))
        r = sb.exec("mkdir -p /workspace/repo/tests && echo fake > /workspace/repo/tests/test_hidden.py")
        assert r.exit_code == 0, r
        with pytest.raises(CordonError) as e:
            sb.exec(["cat", "/workspace/repo/tests/test_hidden.py"], verifier=True)
        assert e.value.status == 409 and e.value.code == "protected_path_moved", e.value
        assert "/workspace/repo/tests" in e.value.message, e.value
        assert sb.exec(["true"]).exit_code == 0  # the sandbox is the agent's again
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()


def test_no_call_runs_beside_a_verifier_step(shared_dir, ws):
    """The process tier's calls are commands too: none may run while a verifier step does (every
    open of a protected path is let through then). Seen failing before the fix: the call was
    run (200) and returned the key."""
    d = Daemon(shared_dir)
    try:
        sb = sandbox(d, ws, "process")
        events = sb.exec_stream(["sh", "-c", "echo start; sleep 2; echo end"], verifier=True)
        assert next(events)["data"] == "start\n"
        status, body = d.http("POST", f"/v1/sandboxes/{sb.id}/call",
                              {"language": "python", "code": "open('/workspace/answer.key').read()"})
        assert status == 409 and body["error"]["code"] == "verifier_running", body
        assert list(events)[-1]["exit_code"] == 0
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()


# ---- item 2: the verifier's environment is not the agent's

# Every plant copies the key where the agent reads it later, and the .pth also turns a failing
# python3 into a passing one.
PLANTS = r"""
set -e
site=$(python3 -c 'import site; print(site.getusersitepackages())')
mkdir -p "$site"
cat > "$site/zz.pth" <<'EOF'
import os; os.system("cat /workspace/answer.key > /workspace/loot-pth 2>/dev/null || rm -f /workspace/loot-pth"); os.path.exists("/workspace/loot-pth") and os._exit(0)
EOF
printf '#!/bin/sh\ncat /workspace/answer.key > /workspace/loot-git 2>/dev/null\nexit 1\n' > /workspace/fsmonitor.sh
chmod +x /workspace/fsmonitor.sh
git init -q /workspace/proj
git config --global core.fsmonitor /workspace/fsmonitor.sh
git -C /workspace/proj config core.fsmonitor /workspace/fsmonitor.sh
printf 'cat /workspace/answer.key > /workspace/loot-bashenv 2>/dev/null\n' > /workspace/bashenv.sh
mkdir -p /workspace/pylib
printf 'import os\nos.system("cat /workspace/answer.key > /workspace/loot-pythonpath 2>/dev/null")\n' \
    > /workspace/pylib/sitecustomize.py
echo planted
"""
VERIFY = ("python3 -c 'raise SystemExit(3)'; echo py=$?; git -C /workspace/proj status >/dev/null 2>&1; "
          "bash -c true; echo home=$HOME; echo x > $HOME/left; echo path=$PATH; echo pp=${PYTHONPATH-}")


def test_the_verifier_does_not_run_what_the_agent_planted(shared_dir, ws, tier):
    """In place: a fresh HOME, no user site, no global or system git config, core.fsmonitor and
    hooks off, BASH_ENV/PYTHON*/LD_* of the spec dropped. Seen failing before the fix (every
    tier): py=0 (the .pth turned the failing check into a pass) and loot-pth, loot-git and
    loot-bashenv held the key (container); HOME was /root (/workspace on the process tier) and
    what the step left there stayed for the agent."""
    d = Daemon(shared_dir)
    try:
        sb = sandbox(d, ws, tier, env={"BASH_ENV": "/workspace/bashenv.sh", "PYTHONPATH": "/workspace/pylib"})
        r = sb.exec(["sh", "-c", PLANTS])
        assert r.stdout.endswith("planted\n"), r
        r = sb.exec(["sh", "-c", VERIFY], verifier=True)
        assert r.exit_code == 0, r
        out = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
        assert out["py"] == "3", r
        assert out["pp"] == "", r
        assert not out["home"].startswith(("/root", "/workspace", "/home")), r
        assert "/workspace" not in out["path"], r
        assert loot(ws) == {}, loot(ws)
        # what the step left in its HOME went with it
        r = sb.exec(["sh", "-c", f"ls -a {out['home']} 2>&1; test ! -e {out['home']}"])
        assert r.exit_code == 0, r
        # the operator's request is trusted: what it sets explicitly, the step gets
        r = sb.exec(["sh", "-c", "echo $PYTHONPATH $HOME"], verifier=True,
                    env={"PYTHONPATH": "/opt/mine", "HOME": "/tmp"})
        assert r.stdout == "/opt/mine /tmp\n", r
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()
    intact(ws)


# ---- item 2: the clean sibling

CONFTEST = "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n" \
           "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
PYTEST = "cd /workspace/repo && python3 -m pytest -q -p no:cacheprovider tests 2>&1; echo rc=$?"


def test_a_sibling_verifier_sees_only_what_was_copied(shared_dir, ws, tier):
    """verifier "sibling": a fresh sandbox of the same spec gets the protected paths and the
    copied tree, nothing else of the agent's. The conftest.py the agent left above the repo
    passes every test in place (documented: in-place mode does not stop it); in the sibling
    the hidden test fails as it should, then passes once the agent's solution is right.
    Seen failing before the fix: 400 invalid_argument (verifier must be true or false)."""
    d = Daemon(shared_dir)
    try:
        sb = sandbox(d, ws, tier, env={"BASH_ENV": "/workspace/bashenv.sh", "PYTHONPATH": "/workspace/pylib"})
        assert sb.exec(["sh", "-c", PLANTS]).stdout.endswith("planted\n")
        sb.files.write("/workspace/conftest.py", CONFTEST.encode())
        assert sb.exec("nohup sleep 600 >/dev/null 2>&1 &").exit_code == 0
        r = sb.exec(["sh", "-c", PYTEST], verifier=True)
        assert "rc=0" in r.stdout, r  # in place, the agent's conftest.py decides
        for n in list(loot(ws)):
            os.unlink(os.path.join(ws, n))
        r = sb.exec(["sh", "-c", PYTEST + "; echo home=$HOME; cat /workspace/answer.key; echo; "
                     "ls -a /workspace; pgrep -x sleep || echo no-sleep"],
                    verifier="sibling", copy=["/workspace/repo"])
        assert "1 failed" in r.stdout and "rc=1" in r.stdout, r
        assert SECRET in r.stdout and "no-sleep" in r.stdout, r
        listing = r.stdout.split(SECRET)[1]
        assert "conftest.py" not in listing and "proj" not in listing and "pylib" not in listing, r
        assert loot(ws) == {}, loot(ws)
        # the copy is the agent's work as it is now
        # (a new file: a VM guest cannot rewrite a file the host made in a 9p bind)
        r = sb.exec("rm /workspace/repo/solution.py && printf 'def solve():\\n    return 42\\n' "
                    "> /workspace/repo/solution.py")
        assert r.exit_code == 0, r
        r = sb.exec(["sh", "-c", PYTEST], verifier="sibling", copy=["/workspace/repo"])
        assert "1 passed" in r.stdout and "rc=0" in r.stdout, r
        # the sibling is gone, the sandbox is the agent's again
        assert [s.id for s in Sandbox.list(endpoint=d.endpoint)] == [sb.id]
        assert sb.exec(["true"]).exit_code == 0
        assert sb.exec("cat /workspace/answer.key").exit_code != 0
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()
    intact(ws)


def test_sibling_copy_is_checked(shared_dir, ws):
    d = Daemon(shared_dir)
    try:
        sb = sandbox(d, ws, "container")
        for copy, needle in [(["relative"], "absolute"), (["/"], "whole root"), (["/proc/self"], "/proc"),
                             (["/a/../b"], "'..'"), ([], "non-empty")]:
            with pytest.raises(CordonError) as e:
                sb.exec(["true"], verifier="sibling", copy=copy)
            assert e.value.status == 400 and e.value.field.startswith("verifier"), e.value
            assert needle in e.value.message, e.value
        with pytest.raises(CordonError) as e:
            sb.exec(["true"], verifier="sibling", copy=["/workspace/nope"])
        assert e.value.code == "copy_failed" and "/workspace/nope" in e.value.message, e.value
        assert sb.exec(["true"]).exit_code == 0
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()


# ---- item 15: inotify on a protected directory

WATCH = r"""
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
ok = []
for p in sys.argv[1:]:
    wd = libc.inotify_add_watch(fd, p.encode(), 0x20 | 0x01 | 0x10)  # IN_OPEN | IN_ACCESS | IN_CLOSE_NOWRITE
    ok.append("%s=%s" % (p, "watch" if wd >= 0 else os.strerror(ctypes.get_errno())))
print(" ".join(ok), flush=True)
if sys.argv[1:] and "watch" in ok[0] and os.fork() == 0:
    os.setsid()
    with open("/tmp/names-%d" % os.getpid(), "w") as out:
        while True:
            buf = os.read(fd, 4096)
            i = 0
            while i < len(buf):
                _, _, _, n = struct.unpack_from("iIII", buf, i)
                out.write(buf[i + 16:i + 16 + n].rstrip(b"\0").decode() + "\n")
                out.flush()
                i += 16 + n
"""


def test_inotify_cannot_watch_a_protected_directory(shared_dir, ws, tier):
    """Seen failing before the fix (every tier): the watch was granted; and (container, by hand)
    the name the harness read through the files API (test_hidden.py) appeared in the agent's
    file of events."""
    d = Daemon(shared_dir)
    try:
        sb = sandbox(d, ws, tier)
        sb.files.write("/tmp/watch.py", WATCH.encode())
        r = sb.exec("ln -s /workspace/repo/tests /tmp/t && python3 /tmp/watch.py /workspace/repo/tests; "
                    "python3 /tmp/watch.py /tmp/t/; python3 /tmp/watch.py /workspace/answer.key; "
                    "python3 /tmp/watch.py /workspace/repo")
        lines = r.stdout.splitlines()
        assert len(lines) == 4, r
        assert lines[0] == "/workspace/repo/tests=Operation not permitted", r
        assert lines[1] == "/tmp/t/=Operation not permitted", r
        assert lines[2] == "/workspace/answer.key=Operation not permitted", r
        assert lines[3] == "/workspace/repo=watch", r  # ordinary directories are watched as ever
        assert sb.files.read("/workspace/repo/tests/test_hidden.py") == HIDDEN.encode()
        time.sleep(0.5)
        r = sb.exec("cat /tmp/names-* 2>/dev/null; true")
        assert "test_hidden.py" not in r.stdout, r
        ev = [e for e in sb.events() if e["type"] == "violation" and e["kind"] == "protect"]
        assert sum(e["op"] == "inotify" for e in ev) == 3, ev
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()


def test_sibling_step_edges(shared_dir, ws, tier):
    """A sibling's violations are the sandbox's; a copy far bigger than what cordond buffers
    arrives whole; a client that hangs up while the sibling is made, or a sandbox deleted while
    its step runs, leaves no sibling behind (the leak check after the test looks for its
    processes, mounts and cgroups)."""
    import socket
    d = Daemon(shared_dir)
    try:
        sb = sandbox(d, ws, tier)
        r = sb.exec("mkdir -p /workspace/repo/big && head -c 24000000 /dev/urandom > /workspace/repo/big/blob && "
                    "sha256sum /workspace/repo/big/blob")
        digest = r.stdout.split()[0]
        r = sb.exec(["sh", "-c", "sha256sum /workspace/repo/big/blob; unshare -r true; echo rc=$?"],
                    verifier="sibling", copy=["/workspace/repo"])
        assert r.stdout.split()[0] == digest and "rc=1" in r.stdout, r
        v = sb.violations()["counts"]
        assert v["syscall"] >= 1, v  # the sibling's unshare, counted here
        ev = [e for e in sb.events() if e["type"] in ("verifier", "exec")]
        assert ev[-2]["type"] == "verifier" and ev[-2]["copied_bytes"] > 24000000, ev[-2:]
        assert ev[-1].get("verifier") == "sibling", ev[-1]
        # a client gone while the sibling is made
        s = socket.socket(socket.AF_UNIX)
        s.connect(d.socket)
        body = b'{"cmd": ["true"], "verifier": {"mode": "sibling", "copy": ["/workspace/repo"]}}'
        s.sendall(b"POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                  % (sb.id.encode(), len(body), body))
        time.sleep(0.05)
        s.close()
        deadline = time.time() + 60
        while time.time() < deadline:
            status, _ = d.http("POST", f"/v1/sandboxes/{sb.id}/exec", {"cmd": ["true"]})
            if status == 200:
                break
            time.sleep(0.2)
        assert status == 200
        # the sandbox deleted while its sibling's step runs
        import threading
        out = {}
        t = threading.Thread(target=lambda: out.update(r=d.http(
            "POST", f"/v1/sandboxes/{sb.id}/exec",
            {"cmd": ["sh", "-c", "echo started; sleep 30"], "verifier": {"mode": "sibling", "copy": ["/workspace/repo"]},
             "stream": True})))
        t.start()
        deadline = time.time() + 60
        while time.time() < deadline and not any(e["type"] == "verifier" for e in sb.events()[-3:]):
            time.sleep(0.2)
        time.sleep(1)
        sb.kill()
        t.join(60)
        assert not t.is_alive()
    finally:
        assert d.stop() == 0, d.output()


PRELOAD_C = r"""
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void steal(void)
{
    char buf[256];
    int in = open("/workspace/answer.key", O_RDONLY);
    ssize_t n = in >= 0 ? read(in, buf, sizeof buf) : -1;
    if (n > 0) {
        int out = open("/workspace/loot-preload", O_WRONLY | O_CREAT | O_APPEND, 0666);
        (void) !write(out, buf, (size_t) n);
    }
}
"""


@pytest.mark.needs_vm
def test_a_writable_preload_list_stops_an_in_place_step(shared_dir, ws):
    """A bind that makes /etc/ld.so.preload writable lets the agent load its code into every
    process, the verifier's included: the in-place step refuses (409 verifier_unsafe); the
    sibling has no read-write bind, so no preload list of the agent's. (A microvm: the container
    tier refuses a read-write bind of a file at setup, landlock; the process tier binds only
    beneath /workspace.) Seen failing before the fix: the step ran, the agent's library copied
    the key (loot-preload)."""
    cordonlib.need_vm()
    import shutil
    import subprocess
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed to build the agent's library"
    src = os.path.join(shared_dir, "steal.c")
    with open(src, "w") as f:
        f.write(PRELOAD_C)
    subprocess.run([cc, "-shared", "-fPIC", "-o", os.path.join(ws, "steal.so"), src], check=True)
    os.chmod(os.path.join(ws, "steal.so"), 0o755)
    preload = os.path.join(shared_dir, "preload")
    open(preload, "w").close()
    os.chmod(preload, 0o666)
    d = Daemon(shared_dir)
    try:
        sb = sandbox(d, ws, "microvm", mounts=[{"source": ws, "target": "/workspace"},
                                                 {"source": preload, "target": "/etc/ld.so.preload"}])
        r = sb.exec("echo /workspace/steal.so >> /etc/ld.so.preload")  # (no O_TRUNC: 9p refuses it here)
        assert r.exit_code == 0, r
        assert loot(ws) == {}  # the agent's own processes cannot read the key
        with pytest.raises(CordonError) as e:
            sb.exec(["cat", "/workspace/answer.key"], verifier=True)
        assert e.value.status == 409 and e.value.code == "verifier_unsafe", e.value
        assert "ld.so.preload" in e.value.message and "sibling" in e.value.message, e.value
        assert loot(ws) == {}, loot(ws)
        r = sb.exec(["sh", "-c", "cat /workspace/answer.key; echo; cat /etc/ld.so.preload 2>&1"],
                    verifier="sibling", copy=["/workspace/repo"])
        assert r.exit_code != 0 and r.stdout.startswith(SECRET + "\n") and "steal" not in r.stdout, r
        assert loot(ws) == {}, loot(ws)
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()
