"""Files moved and chmod-ed inside a sandbox, and `cordon cp` into a directory (issue 21, point 5).

A move is renameat2 on two directories init has opened and judged: the source's last component is
moved itself, never followed; the destination's parents are made on the way. What an agent leaves
on either path is hostile: a symlinked directory into a protected path is refused (403
"protected_path") and counted once, as every files request is. What the operator names directly is
trusted and never counts, but a protected path stays what it is: a read-only mount, not moved.

What the security test catches: with the source's directory opened by a plain open (no
cdn_target_check on it: open_parent → cdn_target_open only), moving /workspace/t/test_hidden.py
(t → the protected tests) failed only as a cross-device move (400 "cross_device": the tests are a
mount of their own) and counted no violation: the agent's attempt to have the operator reach into
the tests went unseen (checked by breaking it so, stop 33)."""

import asyncio
import os
import stat
import subprocess

import pytest

import cordon
from cordon import AsyncSandbox, Sandbox
from cordonlib import CORDON_BIN, Daemon

SECRET = "the-answer-is-42"
HIDDEN = "def test_hidden(): assert solve() == 42\n"


def test_moves_files_and_directories(daemon, tier, shared_dir):
    data = os.path.join(shared_dir, "data")
    os.mkdir(data)
    os.chmod(data, 0o777)
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier,
                        mounts=[{"source": data, "target": "/workspace/data"}]) as sb:
        f = sb.files
        f.write("/workspace/a.txt", b"alpha")
        st = f.rename("/workspace/a.txt", "/workspace/sub/deeper/b.txt")  # parents are made
        assert (st["path"], st["type"], st["size"]) == ("/workspace/sub/deeper/b.txt", "file", 5), st
        assert not f.exists("/workspace/a.txt")
        assert f.read("/workspace/sub/deeper/b.txt") == b"alpha"
        # a directory, with what is in it; "dir/" is the directory
        assert f.rename("/workspace/sub/", "/workspace/moved")["type"] == "dir"
        assert f.read("/workspace/moved/deeper/b.txt") == b"alpha"
        # a destination ending in "/" receives the source under its own name, as mv does
        st = f.rename("/workspace/moved/deeper/b.txt", "/workspace/into/")
        assert st["path"] == "/workspace/into/b.txt" and f.read("/workspace/into/b.txt") == b"alpha", st
        # relative paths are the workdir's, as for every file route
        assert f.rename("into/b.txt", "c.txt")["path"] == "/workspace/c.txt"
        # an existing destination is replaced, unless overwrite=False
        f.write("/workspace/d.txt", b"delta")
        with pytest.raises(cordon.FileExists) as e:
            f.rename("/workspace/c.txt", "/workspace/d.txt", overwrite=False)
        assert (e.value.status, e.value.code, e.value.field) == (409, "exists", "to"), e.value
        assert f.read("/workspace/c.txt") == b"alpha" and f.read("/workspace/d.txt") == b"delta"
        f.rename("/workspace/c.txt", "/workspace/d.txt")
        assert f.read("/workspace/d.txt") == b"alpha" and not f.exists("/workspace/c.txt")
        # a directory over one that is not empty
        f.write("/workspace/full/x", b"x")
        f.mkdir("/workspace/other")
        with pytest.raises(cordon.FileExists) as e:
            f.rename("/workspace/other", "/workspace/full")
        assert e.value.code == "not_empty", e.value
        with pytest.raises(cordon.NotFound):
            f.rename("/workspace/nothing", "/workspace/n2")
        for src, dst, field in (("/", "/workspace/r", "from"), ("/workspace/d.txt", "/workspace/..", "to")):
            with pytest.raises(cordon.InvalidArgument) as e:
                f.rename(src, dst)
            assert "names no entry" in e.value.message, e.value
        # another mount is another file system to rename(2): said, not half done
        with pytest.raises(cordon.InvalidArgument) as e:
            f.rename("/workspace/d.txt", "/workspace/data/d.txt")
        assert (e.value.code, e.value.field) == ("cross_device", "from") and "another file system" in e.value.message
        assert f.read("/workspace/d.txt") == b"alpha" and os.listdir(data) == []
        status, body = daemon.http("POST", f"/v1/sandboxes/{sb.id}/move?from=/workspace/d.txt")
        assert status == 400 and body["error"]["field"] == "to", body
        status, body = daemon.http("POST", f"/v1/sandboxes/{sb.id}/move?path=/x&to=/y")
        assert status == 400 and body["error"]["field"] == "path" and "from, to" in body["error"]["message"], body
        status, body = daemon.http("POST", f"/v1/sandboxes/{sb.id}/move?from=/a&to=/b&overwrite=perhaps")
        assert status == 400 and body["error"]["field"] == "overwrite", body


def test_chmod(daemon, tier):
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        f = sb.files
        f.write("/workspace/run.sh", b"#!/bin/sh\necho ran\n")
        with pytest.raises(cordon.ExecError):  # 0644 as written
            sb.exec(["/workspace/run.sh"])
        st = f.chmod("/workspace/run.sh", 0o755)
        assert st["mode"] == 0o755, st
        assert sb.exec(["/workspace/run.sh"]).stdout == "ran\n"
        assert f.chmod("/workspace/run.sh", "600")["mode"] == 0o600
        assert sb.exec("stat -c %a /workspace/run.sh").stdout == "600\n"
        assert sb.exec("ln -s run.sh /workspace/link").exit_code == 0
        assert f.chmod("/workspace/link", 0o700)["mode"] == 0o700  # followed, as chmod(1) does
        assert f.stat("/workspace/run.sh")["mode"] == 0o700
        with pytest.raises(cordon.NotFound):
            f.chmod("/workspace/none", 0o644)
        for bad in (0o10000, "9", "rwx", "-1"):
            with pytest.raises(cordon.InvalidArgument) as e:
                f.chmod("/workspace/run.sh", bad)
            assert e.value.field == "mode", (bad, e.value)
        status, body = daemon.http("POST", f"/v1/sandboxes/{sb.id}/chmod?path=/workspace/run.sh")
        assert status == 400 and body["error"]["field"] == "mode", body


def test_async_rename_and_chmod(daemon):
    async def main():
        async with await AsyncSandbox.create(endpoint=daemon.endpoint) as sb:
            await sb.files.write("/workspace/a", b"1")
            st = await sb.files.rename("/workspace/a", "/workspace/d/")
            assert st["path"] == "/workspace/d/a", st
            await sb.files.write("/workspace/b", b"2")
            with pytest.raises(cordon.FileExists):
                await sb.files.rename("/workspace/b", "/workspace/d/a", overwrite=False)
            assert (await sb.files.chmod("/workspace/d/a", 0o751))["mode"] == 0o751
            assert (await sb.exec("stat -c %a /workspace/d/a")).stdout == "751\n"
    asyncio.run(main())


@pytest.fixture
def ws(shared_dir):
    w = os.path.join(shared_dir, "ws")
    os.makedirs(os.path.join(w, "tests"))
    with open(os.path.join(w, "answer.key"), "w") as f:
        f.write(SECRET)
    with open(os.path.join(w, "tests", "test_hidden.py"), "w") as f:
        f.write(HIDDEN)
    os.chmod(w, 0o777)
    return w


def test_moves_and_chmods_through_an_agents_symlinks_are_refused_and_counted(shared_dir, ws, tier):
    d = Daemon(shared_dir)
    try:
        sb = Sandbox.create(endpoint=d.endpoint, tier=tier, mounts=[{"source": ws, "target": "/workspace"}],
                            protect=["/workspace/answer.key", "/workspace/tests/**"])
        assert sb.exec("ln -s /workspace/tests /workspace/t && ln -s /workspace/answer.key /workspace/k && "
                       "echo mine > /workspace/mine").exit_code == 0
        attempts = [
            ("move", lambda: sb.files.rename("/workspace/t/test_hidden.py", "/workspace/stolen.py")),
            ("move", lambda: sb.files.rename("/workspace/mine", "/workspace/t/conftest.py")),
            ("move", lambda: sb.files.rename("/workspace/mine", "/workspace/t/sub/x.py")),
            ("chmod", lambda: sb.files.chmod("/workspace/k", 0o666)),
            ("chmod", lambda: sb.files.chmod("/workspace/t/test_hidden.py", 0o777)),
        ]
        for op, attempt in attempts:
            with pytest.raises(cordon.Forbidden) as e:
                attempt()
            assert e.value.code == "protected_path" and "symlink" in e.value.message, (op, e.value)
        counts = sb.violations()["counts"]
        assert counts.get("protect", 0) == len(attempts), counts
        ev = [e for e in sb.events() if e["type"] == "violation" and e["kind"] == "protect"]
        assert [e["op"] for e in ev] == [op for op, _ in attempts], ev
        # The agent's link itself is an entry like any: moved, never followed.
        sb.files.rename("/workspace/k", "/workspace/k2")
        assert sb.files.stat("/workspace/k2", follow_symlinks=False)["type"] == "symlink"
        # The operator's own requests are trusted and never count; a protected path stays in place.
        for attempt in (lambda: sb.files.rename("/workspace/answer.key", "/workspace/elsewhere"),
                        lambda: sb.files.rename("/workspace/tests/test_hidden.py", "/workspace/tests/h.py"),
                        lambda: sb.files.chmod("/workspace/tests/test_hidden.py", 0o600)):
            with pytest.raises(cordon.Forbidden) as e:
                attempt()
            assert e.value.code != "protected_path", e.value
        assert sb.violations()["counts"].get("protect", 0) == len(attempts)
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()
    with open(os.path.join(ws, "answer.key")) as f:
        assert f.read() == SECRET
    with open(os.path.join(ws, "tests", "test_hidden.py")) as f:
        assert f.read() == HIDDEN
    assert os.listdir(os.path.join(ws, "tests")) == ["test_hidden.py"]
    assert stat.S_IMODE(os.stat(os.path.join(ws, "tests", "test_hidden.py")).st_mode) == 0o644


def cli(daemon, *args):
    env = dict(os.environ, CORDON_SOCKET=daemon.socket)
    return subprocess.run([CORDON_BIN, *args], capture_output=True, text=True, env=env, timeout=60)


def test_cli_cp_into_directories_mv_and_chmod(daemon, tmp_path):
    with Sandbox.create(endpoint=daemon.endpoint) as sb:
        src = tmp_path / "notes.txt"
        src.write_text("hello\n")
        sb.files.mkdir("/workspace/dir")
        # into a directory: by its trailing slash, or because it is one
        for dest, lands in ((f"{sb.id}:/workspace/dir/", "/workspace/dir/notes.txt"),
                            (f"{sb.id}:/workspace/new/", "/workspace/new/notes.txt"),
                            (f"{sb.id}:/workspace/dir", "/workspace/dir/notes.txt"),
                            (f"{sb.id}:/workspace/plain", "/workspace/plain")):
            sb.files.remove(lands) if sb.files.exists(lands) else None
            r = cli(daemon, "cp", str(src), dest)
            assert r.returncode == 0, (dest, r)
            assert sb.files.read(lands) == b"hello\n", dest
        r = subprocess.run([CORDON_BIN, "cp", "-", f"{sb.id}:/workspace/dir/"], input="x", capture_output=True,
                           text=True, env=dict(os.environ, CORDON_SOCKET=daemon.socket), timeout=60)
        assert r.returncode == 125 and "name the file" in r.stderr, r
        # and out of one into a local directory
        out = tmp_path / "out"
        out.mkdir()
        r = cli(daemon, "cp", f"{sb.id}:/workspace/dir/notes.txt", str(out))
        assert r.returncode == 0 and (out / "notes.txt").read_text() == "hello\n", r
        r = cli(daemon, "cp", f"{sb.id}:/workspace/plain", f"{out}/")
        assert r.returncode == 0 and (out / "plain").read_text() == "hello\n", r
        # mv and chmod
        r = cli(daemon, "mv", f"{sb.id}:/workspace/plain", f"{sb.id}:/workspace/dir/")
        assert r.returncode == 0 and sb.files.exists("/workspace/dir/plain"), r
        r = cli(daemon, "mv", "-n", f"{sb.id}:/workspace/dir/plain", "/workspace/dir/notes.txt")
        assert r.returncode == 125 and "exists" in r.stderr, r
        r = cli(daemon, "chmod", "750", f"{sb.id}:/workspace/dir/plain")
        assert r.returncode == 0 and sb.files.stat("/workspace/dir/plain")["mode"] == 0o750, r
        r = cli(daemon, "chmod", "u+x", f"{sb.id}:/workspace/dir/plain")
        assert r.returncode == 125 and "octal" in r.stderr, r
