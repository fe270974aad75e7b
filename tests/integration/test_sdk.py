"""The Python SDK as a new user meets it (issue 21, "the harness surface").

1. Install: `./install.sh` (meson's install) puts the SDK where Debian's /usr/bin/python3 reads it,
   whatever python3 comes first in PATH; `pip install ./python` works offline.
2. Transport failures are CordonError subclasses: Unavailable (cordond cannot be reached; the
   message names the socket path or URL and the OS's reason), ConnectionLost (the connection ended
   before the answer did), sync and async; IncompleteRead stays for downloads; every 403 is
   Forbidden.
3. AsyncSandbox.events(follow=True) is an async iterator.
4. exec/exec_stream take pty= (True: 24x80, (rows, cols), a dict).
5. ExecResult keeps max_rss_kb.
6. A relative exec cwd is the sandbox's workdir's, as a relative files path is.
7. A cancelled AsyncSandbox.exec / exec_stream, and a sync exec_stream closed early, hang up: the
   command ends and the test process holds no socket of it.

Seen failing before the fix (each test against the SDK and cordond of main, 56f64c7; the details
are in each test's docstring)."""

import asyncio
import glob
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid

import pytest

import cordon
from cordon import AsyncSandbox, Endpoint, Sandbox
from cordonlib import CORDON_BIN, REPO, wait_for

SYSTEM_PYTHON = "/usr/bin/python3"


# ---------------------------------------------------------------- 1. install

def _fake_python3(tmp_path):
    """A directory whose python3 (a shell script) runs another interpreter: a venv of the system's
    python, with a prefix and sys.path of its own, as pyenv's python3 first in PATH is."""
    venv = tmp_path / "venv"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "python3"
    fake.write_text(f'#!/bin/sh\nexec {venv}/bin/python3 "$@"\n')
    fake.chmod(0o755)
    path = f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    out = subprocess.run(["sh", "-c", "python3 -c 'import sys; print(sys.prefix)'"], env=dict(os.environ, PATH=path),
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(venv), "the fake python3 is not first in PATH"
    return path


def _system_sys_path(env):
    out = subprocess.run([SYSTEM_PYTHON, "-c", "import json, sys; print(json.dumps(sys.path))"], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def _import_from(directory, env=None):
    """Import cordon from directory alone in a fresh, isolated system interpreter."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import cordon, cordon.images; "
            "assert cordon.__file__.startswith(sys.argv[1]), cordon.__file__; "
            "assert 'Forbidden' in cordon.__all__; print('ok')")
    return subprocess.run([SYSTEM_PYTHON, "-I", "-c", code, str(directory)], env=env, capture_output=True,
                          text=True, timeout=60)


def test_meson_installs_the_sdk_where_the_system_python_reads_it(tmp_path):
    """The SDK part of ./install.sh (`ninja install` = meson's install, tag python-runtime) with
    another python3 first in PATH: the package lands in a directory on /usr/bin/python3's sys.path,
    all of it (images.py too), and imports there.

    Seen failing before the fix: with the fake python3 (a venv) first in PATH the files went to
    /usr/local/lib/python3/dist-packages/cordon (meson's deb_system scheme; pyenv's python3 put them
    in /usr/local/lib/python3.11/site-packages), on neither sys.path, and without images.py."""
    path = _fake_python3(tmp_path)
    env = dict(os.environ, PATH=path)
    build, dest = tmp_path / "build", tmp_path / "dest"
    r = subprocess.run(["meson", "setup", str(build), "--prefix=/usr/local"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r = subprocess.run(["meson", "install", "-C", str(build), "--destdir", str(dest), "--tags", "python-runtime",
                        "--no-rebuild"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    inits = glob.glob(f"{dest}/**/cordon/__init__.py", recursive=True)
    assert len(inits) == 1, inits
    pkg = os.path.dirname(inits[0])
    installed = os.path.dirname(pkg)[len(str(dest)):]  # where ./install.sh puts it, e.g. /usr/local/lib/…
    assert installed in _system_sys_path(env), f"{installed} is not on {SYSTEM_PYTHON}'s sys.path"
    assert sorted(f for f in os.listdir(pkg) if f.endswith(".py")) == ["__init__.py", "_http.py", "images.py"]
    r = _import_from(os.path.dirname(pkg), env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_pip_installs_the_sdk_offline(tmp_path):
    """`pip install ./python` (python/pyproject.toml, setuptools; no network: --no-index,
    --no-build-isolation), then the package imports in a fresh isolated system interpreter.

    Seen failing before the fix: pip refused the directory ("Neither 'setup.py' nor
    'pyproject.toml' found")."""
    src = tmp_path / "src"
    shutil.copytree(os.path.join(REPO, "python"), src, ignore=shutil.ignore_patterns("__pycache__", "build",
                                                                                      "*.egg-info"))
    target = tmp_path / "target"
    r = subprocess.run([SYSTEM_PYTHON, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                        "--no-cache-dir", "--disable-pip-version-check", "--target", str(target), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert sorted(f for f in os.listdir(target / "cordon") if f.endswith(".py")) == \
        ["__init__.py", "_http.py", "images.py"]
    r = _import_from(target)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# ---------------------------------------------------------------- 3-6: exec and events

def test_async_events_follow_is_an_async_iterator(daemon, tier):
    """`async for ev in sb.events(follow=True)` yields events as they happen; `await sb.events()`
    is still the list, and follow_events() still works.

    Seen failing before the fix: TypeError ("'async for' requires an object with __aiter__ method,
    got coroutine"): follow was ignored."""
    async def main():
        async with await AsyncSandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
            await sb.exec(["true"])
            listed = await sb.events()
            assert isinstance(listed, list) and any(e["type"] == "exec" for e in listed)
            for follow in (lambda: sb.events(follow=True), sb.follow_events):
                seen = []

                async def take():
                    async for ev in follow():
                        seen.append(ev)
                        if ev["type"] == "exec":
                            return
                await asyncio.wait_for(take(), 60)
                assert seen and seen[-1]["type"] == "exec"
    asyncio.run(main())


def test_exec_on_a_pty(daemon, tier):
    """pty=True is 24x80, (rows, cols) and {"rows", "cols"} set the size: `tty` names a terminal and
    `stty size` gives it, in exec and exec_stream, sync and async; without pty, no terminal.

    Seen failing before the fix: TypeError (exec() got an unexpected keyword argument 'pty')."""
    if tier == "process":
        pytest.skip("the process tier has no terminal: Landlock keeps /dev/ptmx out of reach (docs/spec.md, "
                    "limits.ptys)")
    cmd = "tty; stty size"
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        r = sb.exec(cmd)
        assert "not a tty" in r.stdout, r.stdout
        for pty, size in ((True, "24 80"), ((30, 100), "30 100"), ({"rows": 7, "cols": 9}, "7 9")):
            r = sb.exec(cmd, pty=pty)
            assert r.exit_code == 0 and "/dev/pts/" in r.stdout and size in r.stdout, (pty, r.stdout, r.stderr)
        out = "".join(ev.get("data", "") for ev in sb.exec_stream(cmd, pty=(40, 120)))
        assert "/dev/pts/" in out and "40 120" in out, out
        with pytest.raises(ValueError):
            sb.exec(cmd, pty=(1, 2, 3))
        with pytest.raises(cordon.InvalidArgument) as ei:
            sb.exec(cmd, pty=(0, 80))
        assert ei.value.field == "pty"

    async def main():
        async with await AsyncSandbox.create(endpoint=daemon.endpoint, tier=tier) as asb:
            r = await asb.exec(cmd, pty=(25, 81))
            assert "/dev/pts/" in r.stdout and "25 81" in r.stdout, r.stdout
            out = "".join([ev.get("data", "") async for ev in asb.exec_stream(cmd, pty=True)])
            assert "/dev/pts/" in out and "24 80" in out, out
    asyncio.run(main())


def test_exec_result_keeps_max_rss_kb(daemon, tier):
    """ExecResult.max_rss_kb is cordond's answer's: a command that touches 64 MiB has more than
    that at its peak, a `true` much less.

    Seen failing before the fix: AttributeError ('ExecResult' object has no attribute
    'max_rss_kb')."""
    big = "python3 -c 'b = bytearray(64 << 20); b[::4096] = b\"x\" * len(b[::4096])'"
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier, memory_mb=512) as sb:
        r = sb.exec(big)
        assert r.exit_code == 0, r.stderr
        assert r.max_rss_kb >= 64 * 1024, r.max_rss_kb
        small = sb.exec(["true"]).max_rss_kb
        assert 0 < small < r.max_rss_kb, small

    async def main():
        async with await AsyncSandbox.create(endpoint=daemon.endpoint, tier=tier) as asb:
            assert (await asb.exec(["true"])).max_rss_kb > 0
    asyncio.run(main())


def test_a_relative_exec_cwd_is_the_workdir_s(daemon, tier):
    """cwd="sub/dir" runs in <workdir>/sub/dir, the directory files.*("sub/dir/…") reach; an
    absolute one is unchanged; an empty one (SDK) or one with a NUL byte (raw) is refused naming
    cwd; `cordon exec --workdir sub` takes a relative one too.

    Seen failing before the fix: InvalidArgument "cwd: must be an absolute path" (and cordon exec
    refused "--workdir 'sub': unknown flag or bad value")."""
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        workdir = sb.info()["spec"]["workdir"]
        sb.files.write("sub/dir/f.txt", b"here\n")
        r = sb.exec("pwd; cat f.txt", cwd="sub/dir")
        assert r.exit_code == 0 and r.stdout == f"{workdir}/sub/dir\nhere\n", (r.stdout, r.stderr)
        assert sb.exec("pwd", cwd=".").stdout == f"{workdir}\n"
        assert sb.exec("pwd", cwd="/tmp").stdout == "/tmp\n"
        out = "".join(ev.get("data", "") for ev in sb.exec_stream("pwd", cwd="sub"))
        assert out == f"{workdir}/sub\n"
        with pytest.raises(cordon.InvalidArgument) as ei:
            sb.exec("pwd", cwd="")
        assert ei.value.field == "cwd"
        with pytest.raises(cordon.ExecError):
            sb.exec("pwd", cwd="no/such/dir")
        status, body = daemon.http("POST", f"/v1/sandboxes/{sb.id}/exec", {"cmd": ["pwd"], "cwd": "sub\u0000/x"})
        assert status == 400, body
        status, body = daemon.http("POST", f"/v1/sandboxes/{sb.id}/exec", {"cmd": ["pwd"], "cwd": ""})
        assert status == 400 and body["error"]["field"] == "cwd", body
        env = dict(os.environ, CORDON_SOCKET=daemon.socket)
        r = subprocess.run([CORDON_BIN, "exec", sb.id, "--workdir", "sub/dir", "--", "pwd"], env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout == f"{workdir}/sub/dir\n", (r.stdout, r.stderr)

    async def main():
        async with await AsyncSandbox.create(endpoint=daemon.endpoint, tier=tier) as asb:
            await asb.files.mkdir("a")
            assert (await asb.exec("pwd", cwd="a")).stdout == f"{workdir}/a\n"
    asyncio.run(main())
