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
