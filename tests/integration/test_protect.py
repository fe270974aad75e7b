"""Protected paths (issue 5): paths the agent may neither read nor write.

The sandbox binds each protected path on itself read-only (writes, renames,
unlinks, links and new entries fail) and the host answers every open of
those mounts through fanotify: a sandbox process is refused and that is a
"protect" violation with the path and the command; init (the files API) and a
verifier step pass. Masked kernel files (/proc/kallsyms, …) are guarded the
same way ("kernel").

The tests taking `tier` run in a microvm too: there the guest's init does
the same inside the guest (read-only binds; a guard process of its own uid
answers the fanotify permission events and reports refusals to the host).

What these tests catch: with fanotify_start()'s marking removed from box-fanotify.c
(tried once), test_protected_paths_hold_in_cordond fails at its first attack
("direct": `cat` exits 0 with the secret); without the read-only bind the
write attacks would succeed and change the host files ("intact")."""

import json
import os
import signal

import pytest

import cordonlib
from cordonlib import Daemon, wait_for
from cordon import Sandbox, ServerError

SECRET = "the-answer-is-42"
HIDDEN = "def test_hidden(): assert solve() == 42\n"


@pytest.fixture
def ws(shared_dir):
    """A host directory bound as /workspace: an answer key, hidden tests, and work of the agent's."""
    w = os.path.join(shared_dir, "ws")
    os.makedirs(os.path.join(w, "tests", "sub"))
    with open(os.path.join(w, "answer.key"), "w") as f:
        f.write(SECRET)
    with open(os.path.join(w, "tests", "test_hidden.py"), "w") as f:
        f.write(HIDDEN)
    with open(os.path.join(w, "tests", "sub", "deep.txt"), "w") as f:
        f.write(SECRET)
    with open(os.path.join(w, "tests", "run.sh"), "w") as f:
        f.write("#!/bin/sh\necho ran\n")
    os.chmod(os.path.join(w, "tests", "run.sh"), 0o755)
    with open(os.path.join(w, "solution.py"), "w") as f:
        f.write("def solve(): return 41\n")
    os.chmod(os.path.join(w, "solution.py"), 0o666)
    os.chmod(w, 0o777)
    return w


def intact(w):
    with open(os.path.join(w, "answer.key")) as f:
        assert f.read() == SECRET
    with open(os.path.join(w, "tests", "test_hidden.py")) as f:
        assert f.read() == HIDDEN
    assert sorted(os.listdir(os.path.join(w, "tests"))) == ["run.sh", "sub", "test_hidden.py"]


SPEC = dict(protect=["/workspace/answer.key", "/workspace/tests/**"])

# Each attack must fail (non-zero) and must not print the secret.
READS = {
    "direct": "cat /workspace/answer.key",
    "dir-listing": "ls /workspace/tests",
    "nested": "cat /workspace/tests/sub/deep.txt",
    "symlink": "ln -s /workspace/answer.key /tmp/l && cat /tmp/l",
    "dir-symlink": "ln -s /workspace/tests /tmp/t && cat /tmp/t/test_hidden.py",
    "proc-self-root": "cat /proc/self/root/workspace/answer.key",
    "proc-pid-cwd": "cd /workspace/tests && (sleep 5 & p=$!; cat /proc/$p/cwd/test_hidden.py; r=$?; kill $p; exit $r)",
    "reopen-o-path": "python3 -c \"import os; fd = os.open('/workspace/answer.key', os.O_PATH); "
                     "print(open('/proc/self/fd/%d' % fd).read())\"",
    "redirect-in-child": "sh -c 'cat < /workspace/answer.key'",
    "exec": "/workspace/tests/run.sh",
    "python-import": "cd /workspace/tests && python3 -c 'import test_hidden'",
    "init-root": "cat /proc/1/root/workspace/answer.key",
    "copy": "cp /workspace/answer.key /tmp/k && cat /tmp/k",
    "tar": "tar cf - /workspace/tests | tar tvf -  >/dev/null && tar cf - /workspace/tests | tar xOf - | grep -q the-answer",
}
WRITES = {
    "overwrite": "echo x > /workspace/answer.key",
    "append": "echo x >> /workspace/tests/test_hidden.py",
    "truncate": "truncate -s 0 /workspace/answer.key",
    "new-file": "echo 'import pytest' > /workspace/tests/conftest.py",
    "rm": "rm -f /workspace/tests/test_hidden.py",
    "rm-dir": "rm -rf /workspace/tests",
    "rename-away": "mv /workspace/tests /workspace/t2",
    "rename-over": "echo fake > /workspace/fake && mv /workspace/fake /workspace/answer.key",
    "rename-into": "echo fake > /workspace/fake && mv /workspace/fake /workspace/tests/test_hidden.py",
    "hardlink": "ln /workspace/answer.key /workspace/h && cat /workspace/h",
    "chmod": "chmod 000 /workspace/answer.key",
    "touch": "touch /workspace/tests/test_hidden.py",
    "symlink-in": "ln -s /tmp/evil.py /workspace/tests/conftest.py",
    "bind": "mount --bind /workspace/solution.py /workspace/answer.key",
    "unshare": "unshare -rm sh -c 'umount /workspace/answer.key'",
}


def test_protected_paths_hold_in_cordond(shared_dir, ws, tier):
    d = Daemon(shared_dir)
    try:
        sb = Sandbox.create(endpoint=d.endpoint, mounts=[{"source": ws, "target": "/workspace"}], tier=tier, **SPEC)
        readers = []
        for name, cmd in {**READS, **WRITES}.items():
            r = sb.exec(["sh", "-c", cmd])
            assert r.exit_code != 0, (name, r)
            if SECRET in r.stdout or "solve()" in r.stdout:
                readers.append(name)
        assert readers == []
        intact(ws)
        # ordinary work next to them is not hindered
        r = sb.exec(["sh", "-c", "cat /workspace/solution.py && echo more >> /workspace/solution.py && ls /workspace"])
        assert r.exit_code == 0 and "answer.key" in r.stdout and "tests" in r.stdout, r
        v = sb.violations()
        # every read attempt is one or more refused opens; the syscall ones come from mount/unshare
        assert v["counts"]["protect"] >= len(READS) - 1, v  # init-root is refused by /proc's own check
        assert v["counts"]["syscall"] >= 1, v
        ev = [e for e in sb.events() if e["type"] == "violation" and e["kind"] == "protect"]
        assert {"path": "/workspace/answer.key", "op": "open", "cmd": "cat /workspace/answer.key"}.items() \
            <= ev[0].items(), ev[0]
        assert any(e["op"] == "exec" and e["path"] == "/workspace/tests/run.sh" for e in ev), ev
        assert any(e["path"] == "/workspace/tests/sub/deep.txt" for e in ev), ev
        # the files API is the operator's: it reads them
        assert sb.files.read("/workspace/answer.key") == SECRET.encode()
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()
    intact(ws)


def test_verifier_step_reads_them_alone(shared_dir, ws, tier):
    d = Daemon(shared_dir)
    try:
        sb = Sandbox.create(endpoint=d.endpoint, mounts=[{"source": ws, "target": "/workspace"}], tier=tier, **SPEC)
        # an agent process that would snoop while the verifier runs
        assert sb.exec("nohup sh -c 'while :; do cat /workspace/answer.key >> /tmp/loot 2>/dev/null; "
                       "sleep 0.01; done' >/dev/null 2>&1 &").exit_code == 0
        r = sb.exec(["sh", "-c", "cat /workspace/answer.key; cat /workspace/tests/test_hidden.py; "
                     "/workspace/tests/run.sh; pgrep -c -f '[w]hile :' || true"], verifier=True)
        assert r.exit_code == 0, r
        assert r.stdout.startswith(SECRET + HIDDEN + "ran\n"), r
        assert r.stdout.endswith("0\n"), r  # the snooping loop was ended before the step
        r = sb.exec(["sh", "-c", "cat /tmp/loot 2>/dev/null; echo; pgrep -f '[w]hile :' || echo none"])
        assert SECRET not in r.stdout and r.stdout.endswith("none\n"), r
        # after the step the agent is refused again
        assert sb.exec("cat /workspace/answer.key").exit_code != 0
        # a verifier's leftovers are ended with it
        assert sb.exec("sleep 300 >/dev/null 2>&1 &", verifier=True).exit_code == 0
        assert sb.exec("pgrep -x sleep || echo none").stdout == "none\n"
        kinds = [e.get("kind") for e in sb.events() if e["type"] == "violation"]
        assert kinds.count("protect") >= 1
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()
    intact(ws)


def test_a_verifier_step_runs_alone(shared_dir, ws, tier):
    d = Daemon(shared_dir)
    try:
        sb = Sandbox.create(endpoint=d.endpoint, mounts=[{"source": ws, "target": "/workspace"}], tier=tier, **SPEC)
        events = sb.exec_stream(["sh", "-c", "echo start; sleep 2; echo end"], verifier=True)
        first = next(events)
        assert first["type"] == "stdout" and first["data"] == "start\n"
        status, body = d.http("POST", f"/v1/sandboxes/{sb.id}/exec", {"cmd": ["true"]})
        assert status == 409 and body["error"]["code"] == "verifier_running", body
        rest = list(events)
        assert rest[-1]["type"] == "exit" and rest[-1]["exit_code"] == 0
        assert sb.exec(["true"]).exit_code == 0
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()


def test_masked_kernel_files_are_violations(daemon):
    with Sandbox.create(endpoint=daemon.endpoint) as sb:
        r = sb.exec(["sh", "-c", "cat /proc/kallsyms; cat /proc/keys; cat /proc/version >/dev/null && echo fine"])
        assert r.stdout == "fine\n", r
        ev = [e for e in sb.events() if e["type"] == "violation"]
        assert [e["kind"] for e in ev] == ["kernel", "kernel"], ev
        assert [e["path"] for e in ev] == ["/proc/kallsyms", "/proc/keys"]
        assert sb.violations()["counts"]["kernel"] == 2


def test_kill_mode_ends_the_sandbox_on_a_protected_read(shared_dir, ws, tier):
    d = Daemon(shared_dir)
    try:
        sb = Sandbox.create(endpoint=d.endpoint, mounts=[{"source": ws, "target": "/workspace"}], tier=tier,
                            on_violation="kill", **SPEC)
        with pytest.raises(ServerError):  # the sandbox ended before the command did
            sb.exec(["sh", "-c", "cat /workspace/tests/test_hidden.py; echo after"])
        info = sb.info()
        assert info["state"] == "exited" and info["exit_reason"] == "killed on violation: protect", info
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()
    intact(ws)


@pytest.mark.parametrize("protect,field,needle", [
    (["relative/path"], "protect[0]", "absolute"),
    (["/workspace/**/x"], "protect[0]", "trailing"),
    (["/ok", "/a/../b"], "protect[1]", "'..'"),
    (["/"], "protect[0]", "whole root"),
    (["/workspace/nope"], "protect[0]", "does not exist"),
    ([f"/p{i}" for i in range(40)], "protect", "at most"),
])
def test_bad_protect_entries_are_refused(daemon, protect, field, needle):
    status, body = daemon.http("POST", "/v1/sandboxes", {"protect": protect})
    assert status == 400, body
    assert body["error"]["field"] == field and needle in body["error"]["message"], body


def test_protection_outlives_a_cordond_crash(shared_dir, ws, tier):
    d = Daemon(shared_dir, keep=True)
    sb = Sandbox.create(endpoint=d.endpoint, mounts=[{"source": ws, "target": "/workspace"}], tier=tier, **SPEC)
    assert sb.exec("cat /workspace/answer.key").exit_code != 0
    d.kill9()
    d2 = Daemon(shared_dir)
    try:
        assert "adopted 1 sandboxes" in d2.output(), d2.output()
        again = Sandbox.connect(sb.id, endpoint=d2.endpoint)
        r = again.exec("cat /workspace/answer.key; cat /workspace/tests/test_hidden.py")
        assert r.exit_code != 0 and SECRET not in r.stdout, r
        assert again.violations()["counts"]["protect"] == 2
        r = again.exec(["cat", "/workspace/answer.key"], verifier=True)
        assert r.stdout == SECRET, r
        again.kill()
    finally:
        assert d2.stop() == 0, d2.output()
    intact(ws)


def test_cordon_run_protect(ws, tier):
    t = ["--tier", tier]
    r = cordonlib.run(["--json", *t, "--bind", f"{ws}:/workspace", "--protect", "/workspace/answer.key",
                       "--protect", "/workspace/tests/**", "--",
                       "sh", "-c", "cat /workspace/answer.key; ls /workspace/tests; echo x > /workspace/answer.key; "
                       "cat /proc/kallsyms; cat /workspace/solution.py"], timeout=120)
    assert r.code == 0 and SECRET not in r.stdout and "solve" in r.stdout, r
    rec = r.record
    if tier in ("container", "process"):
        # two refused opens (fanotify) and one write attempt (the seccomp report)
        assert rec["violations"]["protect"] == 3 and rec["violations"]["kernel"] == 1, rec
    else:
        # a guest: the two refused opens (its guard); its writes are refused by the read-only bind
        # without a report, and its /proc/kallsyms is an empty mask of the guest's own
        assert rec["violations"]["protect"] == 2, rec
    intact(ws)
    r = cordonlib.run([*t, "--bind", f"{ws}:/workspace", "--protect", "/workspace/answer.key",
                       "--on-violation", "kill", "--", "sh", "-c", "cat /workspace/answer.key; echo after"], timeout=120)
    assert r.code == 137 and "after" not in r.stdout, r
    r = cordonlib.run([*t, "--protect", "/nope", "--", "true"], timeout=120)
    assert r.code == 125 and "protect" in r.stderr, r


# 64 readers released at once (the pipe's EOF), so that their opens queue together.
READERS = """
import os
r, w = os.pipe()
for i in range(64):
    if os.fork() == 0:
        os.close(w)
        os.read(r, 1)
        try:
            with open('/workspace/answer.key') as f:
                data = f.read()
        except OSError as e:
            data = str(e)
        with open('/workspace/out/%d' % i, 'w') as f:
            f.write(data)
        os._exit(0)
os.close(r)
os.close(w)
for i in range(64):
    os.wait()
print('after')
"""


def test_no_reader_gets_a_protected_file_while_the_kill_takes(ws, tier):
    """Kill mode, 64 readers released at once: the first refused open kills the sandbox; the opens
    queued behind it, and the violator itself, wait unanswered until the kill takes them (session.c
    cdn_session_file_open; a guest's fanotify process), then the run ends 137 with nothing read.
    What it guards is a race: before the hold, the opens after the kill were let through ("the
    sandbox is going") and the violator ran on; that was seen only under load (a side-by-side run:
    test_cordon_run_protect[container] printed "after"). On an idle machine the build before the
    fix passed this test too (0 of 200 readers wrote a file, 3 runs): the decision itself is pinned
    by test-session.c kill_mode_holds_opens, which fails against it. This one runs the held path end
    to end (the held opens must not hang the run nor leak)."""
    out = os.path.join(ws, "out")
    os.makedirs(out)
    os.chmod(out, 0o777)
    r = cordonlib.run(["--tier", tier, "--bind", f"{ws}:/workspace", "--protect", "/workspace/answer.key",
                       "--on-violation", "kill", "--", "python3", "-c", READERS], timeout=120)
    assert r.code == 137 and "after" not in r.stdout, r
    leaked = []
    for name in os.listdir(out):
        with open(os.path.join(out, name)) as f:
            if SECRET in f.read():
                leaked.append(name)
    assert not leaked, f"{len(leaked)} readers got the key: {sorted(leaked)}"
    intact(ws)


INOTIFY = (
    "import ctypes, os, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "fd = libc.inotify_init1(0)\n"
    "for p in sys.argv[1:]:\n"
    "    wd = libc.inotify_add_watch(fd, p.encode(), 0x20 | 0x01)\n"
    "    print(p, 'watch' if wd >= 0 else os.strerror(ctypes.get_errno()), flush=True)\n")


def test_cordon_run_refuses_inotify_on_a_protected_path(ws, tier):
    """cordon run decides watches as cordond does (one session, supervise/session.c): a watch on a
    protected directory is refused and a protect violation; elsewhere it is made. Seen failing before
    cordon run used the session (container and process tiers): the watch was granted and nothing
    counted (cordon run let the kernel make every watch)."""
    r = cordonlib.run(["--json", "--tier", tier, "--bind", f"{ws}:/workspace", "--protect", "/workspace/tests/**",
                       "--", "python3", "-c", INOTIFY, "/workspace/tests", "/workspace"], timeout=120)
    assert r.code == 0, r
    assert r.stdout.splitlines() == ["/workspace/tests Operation not permitted", "/workspace watch"], r
    assert r.record["violations"]["protect"] == 1, r.record
