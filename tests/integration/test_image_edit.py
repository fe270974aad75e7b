"""Editing an image's own files in place (issue 20, point 5).

SWE-style tasks keep the repository in the image (/testbed, owned by root there) and the agent edits
it where it is. The image's owners must appear inside as the image says: root as the sandbox's root,
uid 1000 as its uid 1000, so that writes, `sed -i`, new files and git work on them.

Seen failing before idmapped lower layers (container tier, the image's files were nobody's inside):
`sh: can't create /testbed/README: Permission denied`, `touch: /testbed/new: Permission denied`,
and git's "fatal: detected dubious ownership in repository at '/testbed'". On the microvm tier, before
the guest wrote its image root in place: `stat: can't stat '/home/dev/notes'` (an empty tmpfs bound over
the image's /home) and, through the files API, `write '/testbed/README': Read-only file system`."""

import os
import shutil
import subprocess
import tempfile

import pytest

import cordonlib
from cordon import Sandbox
from cordonlib import run

IMAGE_TIERS = ["container", pytest.param("microvm", marks=pytest.mark.needs_vm)]


def _copy_with_libs(root, binary):
    """binary and the shared libraries ldd names for it, at the same paths under root."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    paths = [binary] + [w for line in out.splitlines() for w in line.split() if w.startswith("/")]
    for p in paths:
        dst = root + os.path.realpath(p) if p != binary else root + p
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(os.path.realpath(p), dst)
        if os.path.realpath(p) != p and not os.path.lexists(root + p):
            os.makedirs(os.path.dirname(root + p), exist_ok=True)
            os.symlink(os.path.realpath(p), root + p)


@pytest.fixture(scope="module")
def repo_image():
    """A directory image (busybox, the host's git with its libraries) holding a git repository in
    /testbed owned by root, and a home owned by uid 1000 — as the files of an image are on disk."""
    bb = shutil.which("busybox") or "/bin/busybox"
    git = shutil.which("git")
    cordonlib.need(git, "git is not installed")
    d = tempfile.mkdtemp(prefix="cordon-it-repo-image-", dir="/tmp")
    os.chmod(d, 0o755)
    cordonlib.build_busybox_image(d, bb)
    _copy_with_libs(d, os.path.realpath(git))
    if os.path.realpath(git) != "/usr/bin/git":
        os.makedirs(d + "/usr/bin", exist_ok=True)
        os.symlink(os.path.realpath(git), d + "/usr/bin/git")
    tb = os.path.join(d, "testbed")
    os.makedirs(tb)
    with open(os.path.join(tb, "README"), "w") as f:
        f.write("hello\n")
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", HOME=d)
    for args in (["init", "-q"], ["add", "README"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"]):
        subprocess.run([git, "-C", tb] + args, check=True, env=env)
    home = os.path.join(d, "home", "dev")
    os.makedirs(home)
    with open(os.path.join(home, "notes"), "w") as f:
        f.write("mine\n")
    for p in (os.path.join(d, "home", "dev"), os.path.join(home, "notes")):
        os.chown(p, 1000, 1000)
    yield d
    shutil.rmtree(d, ignore_errors=True)


EDIT = r"""
set -e
export HOME=/root PATH=/usr/bin:/bin
stat -c '%u %g' /testbed /testbed/README /home/dev/notes
echo more >> /testbed/README
sed -i s/hello/HELLO/ /testbed/README
touch /testbed/new
mkdir /testbed/pkg && echo x > /testbed/pkg/mod.py
git -C /testbed status --porcelain
git -C /testbed -c user.name=a -c user.email=a@b add -A
git -C /testbed -c user.name=a -c user.email=a@b commit -qm two
git -C /testbed log --format=%s
cat /testbed/README
"""


@pytest.mark.parametrize("tier", IMAGE_TIERS)
def test_root_owned_image_files_are_edited_in_place(repo_image, tier):
    before = open(os.path.join(repo_image, "testbed", "README")).read()
    r = run(["--tier", tier, "--image", repo_image, "--", "sh", "-c", EDIT], timeout=180)
    assert r.code == 0, (r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    # As the image says: root's files are the sandbox root's, uid 1000's stay uid 1000's.
    assert lines[:3] == ["0 0", "0 0", "1000 1000"], lines
    assert " M README" in lines and "?? new" in lines and "?? pkg/" in lines, lines
    assert lines[-4:] == ["two", "one", "HELLO", "more"], lines
    # The image itself is not changed: the edits went to the sandbox's writable layer.
    assert open(os.path.join(repo_image, "testbed", "README")).read() == before
    assert not os.path.exists(os.path.join(repo_image, "testbed", "new"))


@pytest.mark.parametrize("tier", IMAGE_TIERS)
def test_files_api_writes_root_owned_image_files(repo_image, tier, daemon):
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier, image=repo_image) as sb:
        sb.files.write("/testbed/README", b"from the api\n")
        sb.files.write("/testbed/api/new.txt", b"new\n")
        assert sb.files.read("/testbed/README") == b"from the api\n"
        r = sb.exec(["sh", "-c", "stat -c '%u %n' /testbed/README /testbed/api/new.txt; "
                     "HOME=/root git -C /testbed status --porcelain"])
        assert r.exit_code == 0, r
        assert r.stdout.splitlines() == ["0 /testbed/README", "0 /testbed/api/new.txt", " M README", "?? api/"], r.stdout
