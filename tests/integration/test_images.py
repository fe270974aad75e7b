"""OCI images (issue 20): pulled from a registry of the test's own (Debian's docker-registry on
loopback) or read from an OCI layout, stored once, and run as a sandbox's root on an overlay of
their layers, with the image config applied."""

import base64
import json
import os
import shutil
import subprocess
import threading

import pytest

import cordonlib
from cordon import CordonError, Sandbox
from cordonlib import run
from registry import Layer

BUSYBOX = "/bin/busybox"


def cordon(*args, env=None, timeout=300):
    return subprocess.run([cordonlib.CORDON_BIN, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def busybox_layer():
    """A base layer: a static busybox and its applets, /etc/passwd, /tmp."""
    bb = shutil.which("busybox") or BUSYBOX
    cordonlib.need(cordonlib.is_static_elf(bb), f"{bb} is not statically linked (install busybox-static)")
    with open(bb, "rb") as f:
        layer = Layer().dir("bin").file("bin/busybox", f.read(), mode=0o755).dir("etc").dir("tmp", mode=0o1777)
    layer.file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\ndev:x:1000:1000::/home/dev:/bin/sh\n")
    layer.file("etc/group", "root:x:0:\ndev:x:1000:\n")
    for a in subprocess.run([bb, "--list"], capture_output=True, text=True, check=True).stdout.split():
        if a != "busybox":
            layer.symlink("bin/" + a, "busybox")
    return layer


def task_layers():
    """The base, and a layer that deletes, replaces, links and owns what a task image does."""
    base = busybox_layer().file("etc/gone", "old\n").dir("opt/data").file("opt/data/old", "x")
    top = (Layer().whiteout("etc/gone").opaque("opt/data").file("opt/data/new", "n")
           .dir("testbed").file("testbed/README", "hello\n").hardlink("testbed/README.link", "testbed/README")
           .symlink("testbed/readme", "README")
           .dir("home/dev", uid=1000, gid=1000).file("home/dev/notes", "mine\n", uid=1000, gid=1000)
           .file("bin/suid", "#!/bin/sh\n", mode=0o4755)
           .file("testbed/tagged", "x", pax={"SCHILY.xattr.user.origin": "layer2"}))
    return [base, top]


CONFIG = {"Env": ["PATH=/bin", "FROM_IMAGE=yes", "SHARED=image"], "WorkingDir": "/testbed",
          "Cmd": ["sh", "-c", "echo default-cmd; pwd"]}


@pytest.fixture
def task_layout(oci_layout):
    lay = oci_layout()
    lay.tag(lay.new_image(task_layers(), compression="gzip", config=CONFIG), "v1")
    return lay


def test_an_oci_layout_runs_with_its_layers_and_config(task_layout):
    ref = f"oci:{task_layout.path}:v1"
    r = run(["--image", ref], timeout=120)  # no command: the image's Cmd, in its WorkingDir
    assert (r.code, r.stdout) == (0, "default-cmd\n/testbed\n"), r
    script = ("echo $FROM_IMAGE $SHARED; pwd; ls /etc; ls /opt/data; stat -c '%u:%g %n' /home/dev/notes /testbed/README; "
              "stat -c '%a' /bin/suid; stat -c '%h %i' /testbed/README /testbed/README.link | sort -u | wc -l; "
              "cat /testbed/readme; getfattr -n user.origin --only-values /testbed/tagged 2>/dev/null || "
              "busybox getfattr -n user.origin /testbed/tagged 2>/dev/null || echo no-getfattr")
    r = run(["--image", ref, "--env", "SHARED=spec", "--", "sh", "-c", script], timeout=120)
    assert r.code == 0, r
    lines = r.stdout.splitlines()
    assert lines[0] == "yes spec"  # the spec's env wins over the image's
    assert lines[1] == "/testbed"
    assert "gone" not in lines[2:5] and "passwd" in lines  # the whiteout deleted /etc/gone
    assert "new" in lines and "old" not in lines  # the opaque directory hid the base's files
    assert "1000:1000 /home/dev/notes" in lines and "0:0 /testbed/README" in lines
    assert "4755" in lines  # the setuid bit is kept (the mount is nosuid: it grants nothing)
    assert "1" in lines  # one inode for the hard link's two names
    assert "hello" in lines
    r = run(["--image", ref, "--workdir", "/tmp", "--", "pwd"], timeout=120)
    assert (r.code, r.stdout) == (0, "/tmp\n"), r


def test_image_files_are_not_changed_by_a_sandbox(task_layout):
    ref = f"oci:{task_layout.path}:v1"
    r = run(["--image", ref, "--", "sh", "-c", "echo more >> /testbed/README; rm /testbed/README.link; "
             "cat /testbed/README"], timeout=120)
    assert (r.code, r.stdout) == (0, "hello\nmore\n"), r
    r = run(["--image", ref, "--", "sh", "-c", "cat /testbed/README /testbed/README.link"], timeout=120)
    assert (r.code, r.stdout) == (0, "hello\nhello\n"), r


def _python_like_layers():
    """python3 from the host with its libraries and standard library, over the busybox base: a
    layer each, as an image that builds on a base image has."""
    py = os.path.realpath("/usr/bin/python3")  # Debian's, whose standard library is in /usr/lib
    libs = Layer()
    out = subprocess.run(["ldd", py], capture_output=True, text=True, check=True).stdout
    seen = set()
    for path in [py] + [w for line in out.splitlines() for w in line.split() if w.startswith("/")]:
        real = os.path.realpath(path)
        for name in {real, path}:
            if name in seen:
                continue
            seen.add(name)
            with open(real, "rb") as f:
                libs.file(name.lstrip("/"), f.read(), mode=0o755)
    libs.symlink("usr/bin/python3", os.path.basename(py)) if os.path.basename(py) != "python3" else None
    stdlib = Layer()
    ver = f"python3.{subprocess.run([py, '-c', 'import sys; print(sys.version_info[1])'], capture_output=True, text=True, check=True).stdout.strip()}"
    root = f"/usr/lib/{ver}"
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ("test", "site-packages", "dist-packages", "__pycache__", "idlelib",
                                               "tkinter", "ensurepip", "lib2to3", "pydoc_data")]
        for n in files:
            p = os.path.join(d, n)
            if os.path.islink(p) or not n.endswith(".py"):
                continue
            with open(p, "rb") as f:
                stdlib.file(p.lstrip("/"), f.read())
    return [busybox_layer(), libs, stdlib]


@pytest.fixture(scope="module")
def python_like_layers():
    return _python_like_layers()


def test_a_registry_image_is_pulled_and_runs(registry_factory, oci_layout, python_like_layers):
    """Issue 20's "done when": cordon run --image <local registry>/python-like:1 -- python3 -c 'print(1)'."""
    reg = registry_factory()
    lay = oci_layout()
    lay.tag(lay.new_image(python_like_layers, compression="gzip", config={"Env": ["PATH=/usr/bin:/bin"]}), "1")
    reg.push(lay.path, "1", "python-like")
    ref = f"{reg.host}/python-like:1"
    env = {"CORDON_INSECURE_REGISTRIES": reg.host}
    r = run(["--image", ref, "--", "python3", "-c", "print(1)"], timeout=300, env={**os.environ, **env})
    assert (r.code, r.stdout) == (0, "1\n"), r
    ls = json.loads(cordon("image", "ls", "--json").stdout)
    assert any(row["reference"] == ref and row["layers"] == 3 for row in ls), ls
    # Pulled once: with the registry gone, the stored image still runs (--pull never, and the default).
    reg.stop()
    for flags in (["--pull", "never"], []):
        r = run(["--image", ref, *flags, "--", "python3", "-c", "print(2)"], timeout=120, env={**os.environ, **env})
        assert (r.code, r.stdout) == (0, "2\n"), r
    r = run(["--image", ref, "--pull", "always", "--", "true"], timeout=120, env={**os.environ, **env})
    assert r.code == cordonlib.EXIT_CORDON and "image" in r.stderr, r
    assert cordon("image", "rm", ref).returncode == 0
    assert ref not in cordon("image", "ls").stdout


def test_inspect_rm_and_prune(registry_factory, task_layout):
    reg = registry_factory(tls=True, auth="basic")
    reg.push(task_layout.path, "v1", "team/task", "7")
    ref = f"{reg.host}/team/task:7"
    auth = os.path.join(task_layout.path, "auth.json")
    with open(auth, "w") as f:
        token = base64.b64encode(f"{reg.user}:{reg.password}".encode()).decode()
        json.dump({"auths": {reg.host: {"auth": token}}}, f)
    env = {"REGISTRY_AUTH_FILE": auth, "CORDON_REGISTRY_CA_FILES": reg.ca_file}
    r = cordon("image", "pull", ref, env=env)
    assert r.returncode == 0, r.stderr
    info = json.loads(cordon("image", "inspect", ref).stdout)
    assert info["reference"] == ref and len(info["layers"]) == 2
    assert info["config"]["WorkingDir"] == "/testbed" and info["config"]["Cmd"] == CONFIG["Cmd"]
    assert info["platform"]["os"] == "linux"
    # Without the CA, TLS fails; without credentials, the registry refuses: each said plainly.
    r = cordon("image", "pull", ref, env={"REGISTRY_AUTH_FILE": auth})
    assert r.returncode == 125 and "certificate" in r.stderr.lower(), r.stderr
    r = cordon("image", "pull", ref, env={"REGISTRY_AUTH_FILE": "/nonexistent", "CORDON_REGISTRY_CA_FILES": reg.ca_file})
    assert r.returncode == 125 and ("401" in r.stderr or "denied" in r.stderr.lower() or "auth" in r.stderr.lower()), r.stderr
    assert cordon("image", "rm", ref).returncode == 0
    r = cordon("image", "inspect", ref)
    assert r.returncode == 125 and "image" in r.stderr
    r = cordon("image", "prune")
    assert r.returncode == 0 and r.stdout.startswith("freed "), r


def test_pull_errors_name_the_image(registry_factory, oci_layout):
    reg = registry_factory()
    env = {"CORDON_INSECURE_REGISTRIES": reg.host}
    r = cordon("image", "pull", f"{reg.host}/nothing:here", env=env)
    assert r.returncode == 125 and "nothing" in r.stderr, r.stderr
    r = run(["--image", f"{reg.host}/nothing:here", "--pull", "never", "--", "true"])
    assert r.code == cordonlib.EXIT_CORDON and "not in the image store" in r.stderr, r
    r = run(["--image", "team/Task:1", "--", "true"])  # a repository is lowercase (no lookup is made)
    assert r.code == cordonlib.EXIT_CORDON and "image" in r.stderr, r
    # A blob whose bytes are not what its digest says: refused, and no image is recorded.
    lay = oci_layout()
    m = lay.new_image([busybox_layer(), Layer().file("etc/x", "payload" * 1000)], config=CONFIG)
    lay.tag(m, "v1")
    reg.push(lay.path, "v1", "bad/img")
    reg.corrupt_blob(m["layers"][1]["digest"])
    r = cordon("image", "pull", f"{reg.host}/bad/img:v1", env=env)
    assert r.returncode == 125 and "digest" in r.stderr, r.stderr
    assert f"{reg.host}/bad/img" not in cordon("image", "ls").stdout


def test_two_pulls_of_one_image_at_once(registry_factory, oci_layout):
    reg = registry_factory()
    lay = oci_layout()
    lay.tag(lay.new_image([busybox_layer(), Layer().file("etc/unique-" + os.urandom(4).hex(), "x")],
                          config=CONFIG), "v1")
    reg.push(lay.path, "v1", "twice/img")
    ref = f"{reg.host}/twice/img:v1"
    env = {"CORDON_INSECURE_REGISTRIES": reg.host}
    results = [None, None]

    def pull(i):
        results[i] = cordon("image", "pull", ref, env=env)

    threads = [threading.Thread(target=pull, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
    r = run(["--image", ref, "--pull", "never", "--", "cat", "/etc/passwd"])
    assert r.code == 0 and "root:" in r.stdout, r
    assert cordon("image", "rm", ref).returncode == 0


def test_an_oci_image_through_cordond(daemon, task_layout):
    ref = f"oci:{task_layout.path}:v1"
    assert cordon("image", "pull", ref).returncode == 0
    with Sandbox.create(endpoint=daemon.endpoint, image=ref) as sb:
        r = sb.exec(["sh", "-c", "cat /testbed/README; stat -c %u /home/dev/notes"])
        assert (r.exit_code, r.stdout) == (0, "hello\n1000\n"), r
        sb.files.write("/testbed/README", b"edited\n")
        assert sb.files.read("/testbed/README") == b"edited\n"
    assert cordon("image", "rm", ref).returncode == 0


def test_cordond_sees_a_tag_pulled_again_and_a_removed_image(daemon, oci_layout):
    """cordond keeps what a reference resolved to, checked by one stat of the reference's file in
    the store: a tag pulled again with other content, and a removed image, show at the next create.
    Caught (shown with the file check made always true): the sandbox after the second pull ran the
    first pull's layers, its /version said "one"."""
    lay = oci_layout()
    ref = f"oci:{lay.path}:t"

    def pull(text):
        lay.tag(lay.new_image([busybox_layer(), Layer().file("version", text)], config={"Env": ["PATH=/bin"]}), "t")
        r = cordon("image", "pull", ref)
        assert r.returncode == 0, r.stderr

    def version():
        with Sandbox.create(endpoint=daemon.endpoint, image=ref) as sb:
            r = sb.exec(["cat", "/version"])
            assert r.exit_code == 0, r
            return r.stdout

    pull("one")
    assert [version(), version()] == ["one", "one"]
    pull("two")
    assert version() == "two"
    # the last sandbox holds the image until its teardown (in the background) ends
    cordonlib.wait_for(lambda: cordon("image", "rm", ref).returncode == 0, timeout=15, what="image rm")
    with pytest.raises(CordonError) as e:
        Sandbox.create(endpoint=daemon.endpoint, image=ref, pull="never")  # "missing" would pull it again
    assert "not in the image store" in str(e.value), e.value


def test_oci_and_docker_archives_run(task_layout, tmp_path):
    """oci-archive: and docker-archive: (docker save's format), made by skopeo from a layout."""
    from registry import skopeo
    oa, da = str(tmp_path / "img.oci.tar"), str(tmp_path / "img.docker.tar")
    skopeo(str(tmp_path), "copy", f"oci:{task_layout.path}:v1", f"oci-archive:{oa}:v1")
    skopeo(str(tmp_path), "copy", f"oci:{task_layout.path}:v1", f"docker-archive:{da}:team/task:v1")
    for ref in (f"oci-archive:{oa}:v1", f"docker-archive:{da}"):
        r = run(["--image", ref, "--", "cat", "/testbed/README"], timeout=120)
        assert (r.code, r.stdout) == (0, "hello\n"), (ref, r)
        assert cordon("image", "rm", ref).returncode == 0
