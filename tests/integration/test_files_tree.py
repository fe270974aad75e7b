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
import hashlib
import io
import os
import stat
import subprocess
import tarfile

import pytest

import cordon
from cordon import AsyncSandbox, Sandbox
from cordonlib import CORDON_BIN, Daemon
from test_files_api import HIDDEN, SECRET, ws  # noqa: F401 (ws: the protected workspace fixture)


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


# ---------------------------------------------------------------- directories as one tar stream


def make_tree(root):
    """a.txt, run.sh (0755), sub/b.bin (5 MiB), sub/empty/, link → a.txt"""
    (root / "sub" / "empty").mkdir(parents=True)
    (root / "a.txt").write_text("alpha\n")
    (root / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (root / "run.sh").chmod(0o755)
    (root / "sub" / "b.bin").write_bytes(os.urandom(5 << 20))
    os.symlink("a.txt", root / "link")
    return hashlib.sha256((root / "sub" / "b.bin").read_bytes()).hexdigest()


def same_tree(a, b):
    for dirpath, dirnames, filenames in os.walk(a):
        rel = os.path.relpath(dirpath, a)
        other = os.path.join(b, rel)
        assert sorted(os.listdir(dirpath)) == sorted(os.listdir(other)), rel
        for name in filenames + dirnames:
            p, q = os.path.join(dirpath, name), os.path.join(other, name)
            assert os.path.islink(p) == os.path.islink(q), (rel, name)
            if os.path.islink(p):
                assert os.readlink(p) == os.readlink(q), (rel, name)
            elif os.path.isfile(p):
                with open(p, "rb") as f, open(q, "rb") as g:
                    assert f.read() == g.read(), (rel, name)
                assert stat.S_IMODE(os.stat(p).st_mode) == stat.S_IMODE(os.stat(q).st_mode), (rel, name)


def test_directories_up_and_down(daemon, tier, tmp_path):
    src = tmp_path / "src"
    digest = make_tree(src)
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        r = sb.files.upload_dir(str(src), "/workspace/proj")
        assert r["path"] == "/workspace/proj" and r["entries"] == 6 and r["bytes"] == (5 << 20) + 6 + 19, r
        got = sb.exec("cd /workspace/proj && cat a.txt && ./run.sh && readlink link && test -d sub/empty && "
                      "sha256sum sub/b.bin")
        assert got.exit_code == 0, got
        assert got.stdout.split("\n")[:3] == ["alpha", "ran", "a.txt"] and digest in got.stdout, got
        # an existing directory takes it again: files replaced, nothing else touched
        assert sb.exec("echo mine > /workspace/proj/other").exit_code == 0
        sb.files.upload_dir(str(src), "/workspace/proj")
        assert sb.files.read("/workspace/proj/other") == b"mine\n"
        assert sb.exec("rm /workspace/proj/other").exit_code == 0
        out = tmp_path / "out"
        assert sb.files.download_dir("/workspace/proj", str(out)) == 6
        same_tree(str(src), str(out))
        same_tree(str(out), str(src))
        # several files in one request each for the absolute and the relative ones
        assert sb.files.write_many({"/workspace/m/x.txt": b"x", "rel/y.txt": "y", "/workspace/m/z": b""}) == 3
        assert sb.exec("cat /workspace/m/x.txt /workspace/rel/y.txt && test -f /workspace/m/z").stdout == "xy"
        # a bound on the bytes of a download
        with pytest.raises(cordon.TooLarge) as e:
            sb.files.download_dir("/workspace/proj", str(tmp_path / "small"), max_bytes=1 << 20)
        assert e.value.field == "max_bytes", e.value
        with pytest.raises(cordon.NotFound):
            sb.files.download_dir("/workspace/none", str(tmp_path / "none"))


def test_async_directories(daemon, tmp_path):
    src = tmp_path / "src"
    make_tree(src)

    async def main():
        async with await AsyncSandbox.create(endpoint=daemon.endpoint) as sb:
            assert (await sb.files.upload_dir(str(src), "/workspace/p"))["entries"] == 6
            assert await sb.files.download_dir("/workspace/p", str(tmp_path / "out")) == 6
            assert await sb.files.write_many({"/workspace/q/1": b"1", "/workspace/q/2": b"2"}) == 2
            assert (await sb.exec("cat /workspace/q/1 /workspace/q/2")).stdout == "12"
    asyncio.run(main())
    same_tree(str(src), str(tmp_path / "out"))


def tar_of(entries):
    """entries: (name, kind, data_or_target) with kind file, dir, symlink, fifo, hardlink."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, kind, x in entries:
            info = tarfile.TarInfo(name)
            info.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
                         "fifo": tarfile.FIFOTYPE, "hardlink": tarfile.LNKTYPE}[kind]
            if kind in ("symlink", "hardlink"):
                info.linkname = x
            data = x if kind == "file" else b""
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_hostile_archives_are_refused_whole(daemon):
    """Every entry is read before any is written: a refused archive leaves nothing behind."""
    with Sandbox.create(endpoint=daemon.endpoint) as sb:
        put = f"/v1/sandboxes/{sb.id}/archive?path=/workspace/dst"
        for entries, says in (
                ([("ok", "file", b"1"), ("../escape", "file", b"x")], "'..'"),
                ([("ok", "file", b"1"), ("/etc/escape", "file", b"x")], "absolute"),
                ([("l", "symlink", "/etc"), ("l/escape", "file", b"x")], "symlink entry 'l'"),
                ([("ok", "file", b"1"), ("p", "fifo", None)], "FIFO"),
                ([("h", "hardlink", "nothing")], "hard link"),
        ):
            status, body = daemon.http("PUT", put, tar_of(entries))
            assert status == 400 and says in body["error"]["message"], (entries, body)
            assert not sb.files.exists("/workspace/dst") and sb.exec("test -e /etc/escape").exit_code != 0
        status, body = daemon.http("PUT", put, b"not a tar at all" * 100)
        assert status == 400 and body["error"]["code"] == "invalid_archive", body
        # a hard link to a file before it is a copy of it
        status, body = daemon.http("PUT", put, tar_of([("f", "file", b"data"), ("h", "hardlink", "f")]))
        assert status == 200 and sb.files.read("/workspace/dst/h") == b"data", body


def test_what_a_download_meets_in_the_agents_tree(shared_dir, tmp_path, tier):
    """Links stay links (a link to the answer key is a name in the archive, never its bytes, and no
    violation: nothing followed it); FIFOs and devices are left out and hang nothing."""
    w = os.path.join(shared_dir, "ws")
    os.makedirs(os.path.join(w, "tests"))
    with open(os.path.join(w, "answer.key"), "w") as f:
        f.write(SECRET)
    os.chmod(w, 0o777)
    d = Daemon(shared_dir)
    try:
        sb = Sandbox.create(endpoint=d.endpoint, tier=tier, mounts=[{"source": w, "target": "/workspace"}],
                            protect=["/workspace/answer.key", "/workspace/tests/**"])
        assert sb.exec("mkdir /workspace/out && cd /workspace/out && echo result > r.txt && "
                       "ln -s /workspace/answer.key key && ln -s /workspace/tests t && mkfifo fifo").exit_code == 0
        out = tmp_path / "out"
        assert sb.files.download_dir("/workspace/out", str(out)) == 3
        assert sorted(os.listdir(out)) == ["key", "r.txt", "t"]
        assert os.readlink(out / "key") == "/workspace/answer.key" and os.readlink(out / "t") == "/workspace/tests"
        assert sb.violations()["counts"].get("protect", 0) == 0
        # the archive's root through the agent's link into the tests: refused and counted
        assert sb.exec("ln -s /workspace/tests /workspace/tl").exit_code == 0
        with pytest.raises(cordon.Forbidden) as e:
            sb.files.download_dir("/workspace/tl", str(tmp_path / "tl"))
        assert e.value.code == "protected_path", e.value
        assert sb.violations()["counts"].get("protect", 0) == 1
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()


def test_the_sdk_unpacks_beneath_its_destination_only(tmp_path):
    """What a download hands the SDK is the agent's: names that leave the destination, or a link
    the archive made and then writes through, are refused; nothing lands outside."""
    from cordon import _tar
    outside = tmp_path / "outside"
    outside.mkdir()
    for entries in ([("../escape", "file", b"x")],
                    [("l", "symlink", str(outside)), ("l/escape", "file", b"x")],
                    [("/abs", "file", b"x")]):
        with pytest.raises(ValueError):
            _tar.unpack(io.BytesIO(tar_of(entries)), str(tmp_path / "dst"))
        assert os.listdir(outside) == [] and not (tmp_path / "escape").exists()
    # a link on its own is made as a link, and a later file of that name replaces it, not follows it
    n = _tar.unpack(io.BytesIO(tar_of([("l2", "symlink", str(outside / "f")), ("l2", "file", b"mine")])),
                    str(tmp_path / "dst2"))
    assert n == 2 and (tmp_path / "dst2" / "l2").read_bytes() == b"mine" and os.listdir(outside) == []


def test_cli_cp_r_both_ways(daemon, tmp_path):
    src = tmp_path / "proj"
    make_tree(src)
    with Sandbox.create(endpoint=daemon.endpoint) as sb:
        r = cli(daemon, "cp", "-r", str(src), f"{sb.id}:/workspace/copy")  # a new name: the copy itself
        assert r.returncode == 0, r
        assert sb.exec("cd /workspace/copy && cat a.txt && readlink link && stat -c %a run.sh && "
                       "test -d sub/empty").stdout == "alpha\na.txt\n755\n"
        r = cli(daemon, "cp", "-r", str(src), f"{sb.id}:/workspace/copy")  # a directory: the copy goes in
        assert r.returncode == 0 and sb.files.exists("/workspace/copy/proj/sub/b.bin"), r
        out = tmp_path / "back"
        r = cli(daemon, "cp", "-r", f"{sb.id}:/workspace/copy/proj", str(out))
        assert r.returncode == 0, r
        same_tree(str(src), str(out))
        same_tree(str(out), str(src))
        r = cli(daemon, "cp", "-r", f"{sb.id}:/workspace/copy/proj", str(out))  # into it, under its name
        assert r.returncode == 0 and (out / "proj" / "a.txt").read_text() == "alpha\n", r
        # what the agent leaves in its tree cannot lead the CLI's unpacking out of the destination
        assert sb.exec("mkdir /workspace/evil && ln -s /etc /workspace/evil/l").exit_code == 0
        r = cli(daemon, "cp", "-r", f"{sb.id}:/workspace/evil", str(tmp_path / "evil"))
        assert r.returncode == 0 and os.readlink(tmp_path / "evil" / "l") == "/etc", r
        r = cli(daemon, "cp", "-r", "--max-bytes", "1M", f"{sb.id}:/workspace/copy", str(tmp_path / "big"))
        assert r.returncode == 125 and "max_bytes" in r.stderr, r
