"""The files API against a hostile sandbox (issue 18, items 5 and 9).

The operator's requests are trusted, the tree they walk is not: an agent plants
symlinks where the harness will read or write — into a protected path (to have
the operator copy the answer key out for it, or write over the grader), into
/proc (a "file" of gigabytes that says it is empty), at a FIFO or a device —
and swaps them between two looks. init decides on the opened file (openat2
beneath the root, then the fd's mount, file system and type), refuses a
protected path reached through a symlink (a "protect" violation, via
"symlink"), never moves a kernel file system's contents, caps downloads
(max_read / max_bytes), paces them with a window and cancels them when their
client goes, so that one download can neither freeze the sandbox nor exhaust
cordond or the client.

Seen failing before the fix (these tests against main's cordond, cordon-init
and cordon; container, process and microvm):
- test_symlinks_into_protected_paths_are_refused_and_counted, test_kill_mode_…:
  files.read of the agent's link returned the key (no Forbidden raised).
- test_flip_flop_symlink_race_leaks_nothing: 106 (container) and 130
  (microvm) of 200 reads leaked the key.
- test_stat_can_describe_a_symlink_itself: follow=false was ignored (NotFound).
- test_proc_files_via_symlink_are_refused_quickly: 200 and an endless stream
  of /proc/self/pagemap.
- test_reads_are_capped: cordond had no max_read (it refused --max-read).
- test_a_stalled_or_departed_download_does_not_hold_up_the_sandbox: with the
  download's client not reading, `echo ok` got no answer within 10 s.
- test_execs_keep_working_during_a_big_download: an exec took 5.7 s during a
  1 GiB download (container; the process tier and the microvm passed).
- test_sdk_read_is_bounded: files.read returned all 512 MiB (no TooLarge).
- test_cli_cp_streams_and_takes_max_bytes: cp had no --max-bytes.
test_fifos_and_devices_never_hang failed only on the message (init already
refused them), and test_execs_keep_working_during_a_big_upload passed before
too: both guard the new code paths."""

import asyncio
import hashlib
import io
import json
import os
import resource
import socket
import subprocess
import threading
import time

import pytest

import cordon
from cordon import AsyncSandbox, Sandbox
from cordonlib import CORDON_BIN, Daemon, all_procs, wait_for

SECRET = "the-answer-is-42"
HIDDEN = "def test_hidden(): assert solve() == 42\n"
SPEC = dict(protect=["/workspace/answer.key", "/workspace/tests/**"])


@pytest.fixture
def ws(shared_dir):
    """A host directory bound as /workspace: an answer key and hidden tests, protected."""
    w = os.path.join(shared_dir, "ws")
    os.makedirs(os.path.join(w, "tests"))
    with open(os.path.join(w, "answer.key"), "w") as f:
        f.write(SECRET)
    with open(os.path.join(w, "tests", "test_hidden.py"), "w") as f:
        f.write(HIDDEN)
    os.chmod(w, 0o777)
    return w


def intact(w):
    with open(os.path.join(w, "answer.key")) as f:
        assert f.read() == SECRET
    with open(os.path.join(w, "tests", "test_hidden.py")) as f:
        assert f.read() == HIDDEN
    assert os.listdir(os.path.join(w, "tests")) == ["test_hidden.py"]


def protected_box(d, ws, tier, **kw):
    return Sandbox.create(endpoint=d.endpoint, mounts=[{"source": ws, "target": "/workspace"}], tier=tier,
                          **SPEC, **kw)


def raw(daemon, method, path, timeout):
    """A request on a socket of our own: (status, what came, socket): the head and, unless it is a
    200, the whole (small) body; of a 200, whatever came with the head. The caller closes s."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    s.connect(daemon.socket)
    s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode())
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    status = int(got.split(None, 2)[1])
    head, _, body = got.partition(b"\r\n\r\n")
    length = [int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length:")]
    while status != 200 and length and len(body) < min(length[0], 65536):
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, head + b"\r\n\r\n" + body, s


def timed_exec(daemon, sb, cmd, limit):
    """cmd in sb, answered within limit seconds (a socket timeout fails the test)."""
    t = time.monotonic()
    body = json.dumps({"cmd": ["sh", "-c", cmd]}).encode()
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(limit)
    try:
        s.connect(daemon.socket)
        s.sendall(b"POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                  % (sb.id.encode(), len(body), body))
        data = b""
        while not data.endswith(b"}\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pytest.fail(f"{cmd!r} got no answer within {limit} s")
    finally:
        s.close()
    return json.loads(data.split(b"\r\n\r\n", 1)[1]), time.monotonic() - t


def init_fds(daemon, tier):
    """What the sandbox's init has open (container and process tiers: its process is the host's)."""
    comm = {"container": "cordon-init", "process": "cordon-worker"}[tier]
    inits = [p for p in all_procs() if p.ppid == daemon.proc.pid and p.comm == comm and p.uid != 0]
    assert len(inits) == 1, inits
    out = []
    for fd in os.listdir(f"/proc/{inits[0].pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{inits[0].pid}/fd/{fd}"))
        except OSError:
            pass
    return out


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(x for x in f if x.startswith("VmRSS:")).split()[1]) / 1024


def violations(sb):
    return sb.violations()["counts"].get("protect", 0)


# ---------------------------------------------------------------- item 5: symlinks into protected paths


def test_symlinks_into_protected_paths_are_refused_and_counted(shared_dir, ws, tier):
    d = Daemon(shared_dir)
    try:
        sb = protected_box(d, ws, tier)
        r = sb.exec("ln -s /workspace/answer.key /workspace/result.txt && ln -s answer.key /workspace/rel && "
                    "ln -s /workspace/tests /workspace/t && ln -s /workspace/tests/new.py /workspace/out.py")
        assert r.exit_code == 0, r
        attempts = [
            ("read", lambda: sb.files.read("/workspace/result.txt")),
            ("read", lambda: sb.files.read("/workspace/rel")),
            ("read", lambda: sb.files.read("/workspace/t/test_hidden.py")),
            ("list", lambda: sb.files.list("/workspace/t")),
            ("stat", lambda: sb.files.stat("/workspace/result.txt")),
            ("write", lambda: sb.files.write("/workspace/result.txt", b"forged")),
            ("write", lambda: sb.files.write("/workspace/t/conftest.py", b"import os")),
            ("write", lambda: sb.files.write("/workspace/out.py", b"forged")),  # dangling, into the tests
            ("mkdir", lambda: sb.files.mkdir("/workspace/t/sub")),
        ]
        for op, attempt in attempts:
            with pytest.raises(cordon.Forbidden) as e:
                attempt()
            assert e.value.code == "protected_path" and e.value.field == "path", (op, e.value)
            assert SECRET not in str(e.value) and "symlink" in e.value.message, (op, e.value)
        assert violations(sb) == len(attempts)
        ev = [e for e in sb.events() if e["type"] == "violation" and e["kind"] == "protect"]
        assert [e["op"] for e in ev] == [op for op, _ in attempts], ev
        assert {"path": "/workspace/answer.key", "requested": "/workspace/result.txt", "via": "symlink",
                "where": "files"}.items() <= ev[0].items(), ev[0]
        assert ev[2]["path"] == "/workspace/tests/test_hidden.py", ev[2]
        # the operator's own direct access is trusted: no violation
        assert sb.files.read("/workspace/answer.key") == SECRET.encode()
        assert [e["name"] for e in sb.files.list("/workspace/tests")] == ["test_hidden.py"]
        assert sb.files.stat("/workspace/tests/test_hidden.py")["size"] == len(HIDDEN)
        assert violations(sb) == len(attempts)
        # links that lead elsewhere are followed as before
        assert sb.exec("echo fine > /workspace/real && ln -s real /workspace/alias").exit_code == 0
        assert sb.files.read("/workspace/alias") == b"fine\n"
        sb.files.write("/workspace/alias", b"through the alias")
        assert sb.exec("cat /workspace/real").stdout == "through the alias"
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()
    intact(ws)


def test_kill_mode_ends_the_sandbox_on_a_symlinked_read(shared_dir, ws, tier):
    d = Daemon(shared_dir)
    try:
        sb = protected_box(d, ws, tier, on_violation="kill")
        assert sb.exec("ln -s /workspace/answer.key /workspace/result.txt").exit_code == 0
        with pytest.raises(cordon.Forbidden):
            sb.files.read("/workspace/result.txt")
        info = sb.info()
        assert info["state"] == "exited" and info["exit_reason"] == "killed on violation: protect", info
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()


FLIP = """import os
open('/workspace/mine', 'w').write('mine')
while True:
    os.symlink('/workspace/answer.key', '/workspace/.l')
    os.replace('/workspace/.l', '/workspace/result.txt')
    with open('/workspace/.f', 'w') as f:
        f.write('mine')
    os.replace('/workspace/.f', '/workspace/result.txt')
"""


def test_flip_flop_symlink_race_leaks_nothing(shared_dir, ws, tier):
    """The agent swaps result.txt between a file of its own and a link to the key as fast as it can;
    the harness reads it 200 times. Every read is the agent's file or a refusal."""
    d = Daemon(shared_dir)
    try:
        sb = protected_box(d, ws, tier)
        sb.files.write("/tmp/flip.py", FLIP)
        assert sb.exec("nohup python3 /tmp/flip.py >/dev/null 2>&1 &").exit_code == 0
        wait_for(lambda: sb.exec("test -e /workspace/result.txt").exit_code == 0, timeout=30, what="the flipper")
        leaks = refused = mine = 0
        for _ in range(200):
            try:
                data = sb.files.read("/workspace/result.txt")
            except cordon.Forbidden as e:
                assert e.code == "protected_path", e
                refused += 1
                continue
            leaks += SECRET.encode() in data
            mine += data == b"mine"
        assert leaks == 0, f"{leaks} of 200 reads leaked the key"
        assert refused and mine, (refused, mine)  # the race went both ways: the test tested something
        assert violations(sb) == refused
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()
    intact(ws)


def test_stat_can_describe_a_symlink_itself(daemon, tier):
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        assert sb.exec("ln -s /nowhere /workspace/dangling && ln -s /etc /workspace/etc").exit_code == 0
        st = sb.files.stat("/workspace/dangling", follow_symlinks=False)
        assert (st["type"], st["target"], st["path"]) == ("symlink", "/nowhere", "/workspace/dangling"), st
        with pytest.raises(cordon.NotFound):
            sb.files.stat("/workspace/dangling")
        assert sb.files.stat("/workspace/etc")["type"] == "dir"
        assert sb.files.stat("/workspace/etc", follow_symlinks=False)["type"] == "symlink"
        status, body = daemon.http("GET", f"/v1/sandboxes/{sb.id}/stat?path=/workspace/etc&follow=maybe")
        assert status == 400 and body["error"]["field"] == "follow", body
        # a write never follows a link to nothing (it would make a file wherever the agent aimed it)
        with pytest.raises(cordon.InvalidArgument):
            sb.files.write("/workspace/dangling", b"x")
        assert sb.exec("test -e /nowhere").exit_code != 0


# ---------------------------------------------------------------- item 9: bounded, cancellable downloads


def test_proc_files_via_symlink_are_refused_quickly(daemon, tier):
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        assert sb.exec("ln -s /proc/self/pagemap /workspace/output.log && "
                       "ln -s /proc/self/environ /workspace/env.txt").exit_code == 0
        for path in ("/workspace/output.log", "/workspace/env.txt", "/proc/self/status", "/proc/self/cmdline"):
            t = time.monotonic()
            status, head, s = raw(daemon, "GET", f"/v1/sandboxes/{sb.id}/files?path={path}", timeout=10)
            s.close()
            assert status == 403 and b"kernel file system" in head, (path, head[:300])
            assert time.monotonic() - t < 5, path
        with pytest.raises(cordon.Forbidden):
            sb.files.write("/workspace/output.log", b"x")
        r, took = timed_exec(daemon, sb, "echo ok", limit=10)
        assert r["stdout"] == "ok\n" and took < 5, (r, took)
        # metadata is harmless: stat and ls of /proc still answer
        assert sb.files.stat("/proc/self/status")["type"] == "file"


def test_fifos_and_devices_never_hang(daemon, tier):
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        assert sb.exec("mkfifo /workspace/fifo && ln -s /workspace/fifo /workspace/fifo-link && "
                       "ln -s /dev/zero /workspace/zero").exit_code == 0
        for path in ("/workspace/fifo", "/workspace/fifo-link", "/workspace/zero", "/dev/urandom"):
            t = time.monotonic()
            with pytest.raises(cordon.InvalidArgument) as e:
                sb.files.read(path)
            assert "not a regular file" in e.value.message and time.monotonic() - t < 5, (path, e.value)
        t = time.monotonic()
        with pytest.raises(cordon.InvalidArgument):
            sb.files.write("/workspace/fifo-link", b"x")
        assert time.monotonic() - t < 5
        assert sb.exec("echo ok").stdout == "ok\n"


def test_reads_are_capped(shared_dir, tier):
    d = Daemon(shared_dir, "--max-read", "1M")
    try:
        sb = Sandbox.create(endpoint=d.endpoint, tier=tier)
        assert sb.exec("head -c 3145728 /dev/urandom > /workspace/big && echo small > /workspace/small").exit_code == 0
        digest = sb.exec("sha256sum /workspace/big").stdout.split()[0]
        with pytest.raises(cordon.TooLarge) as e:
            sb.files.read("/workspace/big")
        assert (e.value.status, e.value.code, e.value.field) == (413, "file_too_large", "max_bytes"), e.value
        assert "3145728 bytes" in e.value.message and "max_bytes" in e.value.message, e.value
        with pytest.raises(cordon.TooLarge):
            sb.files.read("/workspace/big", max_bytes=(3 << 20) - 1)
        assert hashlib.sha256(sb.files.read("/workspace/big", max_bytes=4 << 20)).hexdigest() == digest
        buf = io.BytesIO()
        assert sb.files.read_to("/workspace/big", buf, max_bytes=3 << 20) == 3 << 20
        assert hashlib.sha256(buf.getvalue()).hexdigest() == digest
        assert sb.files.read("/workspace/small") == b"small\n"

        async def via_async():
            a = await AsyncSandbox.connect(sb.id, endpoint=d.endpoint)
            with pytest.raises(cordon.TooLarge):
                await a.files.read("/workspace/big")
            return await a.files.read("/workspace/big", max_bytes=3 << 20)
        assert hashlib.sha256(asyncio.run(via_async())).hexdigest() == digest
        for query, field in (("&max_bytes=abc", "max_bytes"), ("&max_bytes=0", "max_bytes"),
                             ("&max_bytes=1&max_bytes=2", "max_bytes"), ("&bogus=1", "bogus"),
                             ("&follow=false", "follow")):
            status, body = d.http("GET", f"/v1/sandboxes/{sb.id}/files?path=/workspace/small{query}")
            assert status == 400 and body["error"]["field"] == field, (query, body)
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()


def big_size(tier):
    # a sparse file: no disk, and zeros to read; a guest's virtio-serial under TCG is slower
    return (1 << 30) if tier in ("container", "process") else (256 << 20)


def test_a_stalled_or_departed_download_does_not_hold_up_the_sandbox(daemon, tier):
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        size = big_size(tier)
        assert sb.exec(f"truncate -s {size} /workspace/big && echo small > /workspace/small").exit_code == 0
        rss0 = rss_mb(daemon.proc.pid)
        status, head, s = raw(daemon, "GET", f"/v1/sandboxes/{sb.id}/files?path=/workspace/big&max_bytes={size}",
                              timeout=30)
        try:
            assert status == 200, head[:300]
            time.sleep(1)  # its client reads nothing more: every buffer on the way fills up
            assert rss_mb(daemon.proc.pid) - rss0 < 32, "cordond buffers the stalled download"
            r, took = timed_exec(daemon, sb, "echo ok", limit=10)
            assert r["stdout"] == "ok\n" and took < 5, (r, took)
            assert sb.files.read("/workspace/small") == b"small\n"  # another download beside it
        finally:
            s.close()
        r, took = timed_exec(daemon, sb, "echo ok", limit=10)
        assert r["stdout"] == "ok\n" and took < 5, (r, took)
        if tier in ("container", "process"):  # the download was cancelled in init, not left running
            wait_for(lambda: not any(x.endswith("/workspace/big") for x in init_fds(daemon, tier)), timeout=10,
                     what="init to drop the cancelled download")


def test_execs_keep_working_during_a_big_download(daemon, tier):
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        size = big_size(tier)
        assert sb.exec(f"truncate -s {size} /workspace/big").exit_code == 0

        class Sink:
            n = 0

            def write(self, b):
                self.n += len(b)

        sink, done = Sink(), []
        t = threading.Thread(target=lambda: done.append(sb.files.read_to("/workspace/big", sink, max_bytes=size)))
        t.start()
        slowest = 0.0
        while t.is_alive() and sink.n < size * 0.9:
            r, took = timed_exec(daemon, sb, "echo ok", limit=10)
            assert r["stdout"] == "ok\n", r
            slowest = max(slowest, took)
        t.join(300)
        assert done == [size] and sink.n == size
        assert slowest < 3, f"an exec took {slowest:.1f} s during the download"


def test_execs_keep_working_during_a_big_upload(daemon, tier):
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier, disk_mb=512) as sb:
        blob = os.urandom(1 << 20) * (128 if tier in ("container", "process") else 48)
        done = []
        t = threading.Thread(target=lambda: done.append(sb.files.write("/workspace/up.bin", blob)))
        t.start()
        slowest = 0.0
        while t.is_alive():
            r, took = timed_exec(daemon, sb, "echo ok", limit=10)
            assert r["stdout"] == "ok\n", r
            slowest = max(slowest, took)
        t.join()
        assert done and done[0]["size"] == len(blob), done
        assert slowest < 3, f"an exec took {slowest:.1f} s during the upload"


def test_sdk_read_is_bounded(daemon):
    with Sandbox.create(endpoint=daemon.endpoint) as sb:
        assert sb.exec("truncate -s 512M /workspace/big").exit_code == 0
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t = time.monotonic()
        with pytest.raises(cordon.TooLarge):  # over the default max_read (256M), before any byte moves
            sb.files.read("/workspace/big")
        assert time.monotonic() - t < 5
        with open(os.devnull, "wb") as null:
            assert sb.files.read_to("/workspace/big", null, max_bytes=512 << 20) == 512 << 20
        grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        assert grew_mb < 64, f"the SDK grew by {grew_mb:.0f} MB"


def test_cli_cp_streams_and_takes_max_bytes(daemon, tmp_path):
    with Sandbox.create(endpoint=daemon.endpoint) as sb:
        assert sb.exec("head -c 2097152 /dev/urandom > /workspace/two").exit_code == 0
        digest = sb.exec("sha256sum /workspace/two").stdout.split()[0]
        env = dict(os.environ, CORDON_SOCKET=daemon.socket)
        out = tmp_path / "two"
        r = subprocess.run([CORDON_BIN, "cp", "--max-bytes", "1M", f"{sb.id}:/workspace/two", str(out)],
                           capture_output=True, env=env, timeout=60)
        assert r.returncode == 125 and b"max_bytes" in r.stderr and not out.exists(), r
        r = subprocess.run([CORDON_BIN, "cp", f"{sb.id}:/workspace/two", str(out)], capture_output=True, env=env,
                           timeout=60)
        assert r.returncode == 0, r
        assert hashlib.sha256(out.read_bytes()).hexdigest() == digest


def test_files_as_a_user(daemon, tier):
    """The files API as a user of the sandbox (?user=, files.as_user): what it makes is the user's,
    its permission checks are the user's, and the user is resolved in the sandbox's own
    /etc/passwd. What this catches: a request whose user init dropped (before the change every file
    operation ran as the sandbox's root: u.txt was root's and /root/secret readable). The process
    tier cannot change users: a clear error naming the field, as for its commands."""
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        u = sb.files.as_user("user")
        if tier == "process":
            with pytest.raises(cordon.InvalidArgument) as e:
                u.write("/tmp/u.txt", "x")
            assert e.value.field == "user" and "cannot change users" in e.value.message, e.value
            return
        assert u.write("/tmp/u.txt", "by user")["size"] == 7
        assert u.mkdir("/tmp/ud/a")["type"] == "dir"
        sb.files.write("/root/secret", "root's")
        sb.files.chmod("/root/secret", 0o600)
        r = sb.exec(["sh", "-c", "stat -c %U:%G /tmp/u.txt /tmp/ud /tmp/ud/a /root/secret"])
        assert r.stdout == "user:user\nuser:user\nuser:user\nroot:root\n", r
        for call in (lambda: u.read("/root/secret"), lambda: u.write("/root/x", "x"),
                     lambda: u.remove("/root/secret"), lambda: u.rename("/root/secret", "/root/taken"),
                     lambda: u.chmod("/root/secret", 0o644)):
            with pytest.raises(cordon.Forbidden):
                call()
        assert sb.files.read("/root/secret") == b"root's"  # the operator's own, as root
        assert sb.files.as_user("0").read("/root/secret") == b"root's"
        assert [e["name"] for e in u.list("/tmp/ud")] == ["a"]
        assert u.rename("/tmp/u.txt", "/tmp/ud/v.txt")["path"] == "/tmp/ud/v.txt"
        with pytest.raises(cordon.InvalidArgument) as e:
            sb.files.as_user("ghost").write("/tmp/g.txt", "x")
        assert e.value.field == "user" and "no user 'ghost'" in e.value.message, e.value
        with pytest.raises(cordon.InvalidArgument) as e:
            sb.files.as_user("bad name!").read("/tmp/ud/v.txt")
        assert e.value.field == "user", e.value
        assert u.write_many({"/tmp/up/a/b.txt": "b", "/tmp/up/c.txt": "c"}) == 2  # an archive, as the user
        r = sb.exec(["sh", "-c", "stat -c %U /tmp/up /tmp/up/a /tmp/up/a/b.txt /tmp/up/c.txt"])
        assert r.stdout == "user\n" * 4, r
        with pytest.raises(cordon.Forbidden):
            u.write_many({"/root/up/x.txt": "x"})
        assert sb.exec(["id", "-u"]).stdout == "0\n"  # init's own ids came back
        assert sb.files.write("/root/after", "ok")["size"] == 2


def test_async_files_as_a_user(daemon):
    async def main():
        async with await AsyncSandbox.create(endpoint=daemon.endpoint) as sb:
            await sb.files.as_user("user").write("/tmp/a.txt", "a")
            return (await sb.exec(["stat", "-c", "%U", "/tmp/a.txt"])).stdout
    assert asyncio.run(main()) == "user\n"
