"""Bind sources (issue 18, item 15; docs/spec.md "Bind sources"): a spec's mounts[i].source is a
host path chosen by a client — through TCP, a remote one. cordond and `cordon run` refuse cordon's
own state, run and VM directories, the daemon's records and sockets, the host's /proc, /sys and
/dev, and anything that contains one of them (/, /var/lib, /run); sources are resolved first, so
`..` and symlinks do not get around it, and bound through an fd opened without following
symlinks, so a path swapped after the check is refused rather than followed. bind-allow (cordond's
configuration, `cordon run --bind-allow`) restricts the sources to the directories it names and
can name a place beneath a refused one; `DIR:ro` allows read-only binds only."""

import ctypes
import os
import tempfile
import threading

import pytest

from cordon import Sandbox
from cordonlib import EXIT_CORDON, Daemon, HostState, run


def refused_sources(workdir, daemon=False):
    """(source as given, what the message must name) for the default policy; workdir: a directory
    of the test's (for a symlink), and with daemon the Daemon's (its records and socket)."""
    link = os.path.join(workdir, "to-state")
    if not os.path.lexists(link):
        os.symlink("/var/lib/cordon", link)
    out = [("/", "/proc"), ("/proc", "/proc"), ("/proc/1/root", "/proc"), ("/sys", "/sys"), ("/dev", "/dev"),
           ("/var/lib/cordon", "/var/lib/cordon"), ("/var/lib", "/var/lib/cordon"), ("/run/cordon", "/run/cordon"),
           ("/tmp/../proc", "/proc"), (link, "/var/lib/cordon")]
    if daemon:  # the daemon's own records and socket, and what holds them
        records = os.path.join(workdir, "sandboxes")
        out += [(records, records), (os.path.join(workdir, "cordond.sock"), "cordond.sock"), (workdir, records)]
    return [(s, n) for s, n in out if os.path.lexists(s)]


def test_api_refuses_cordons_and_the_kernels_paths(daemon, shared_dir, tier):
    """Seen failing before the fix: {"source": "/"} (and /proc, /var/lib/cordon) was 201 Created,
    the sandbox seeing the host's root, its kernel files and cordon's state."""
    for source, named in refused_sources(shared_dir, daemon=True):
        for readonly in (True, False):
            status, resp = daemon.http("POST", "/v1/sandboxes", {"tier": tier, "mounts": [
                {"source": source, "target": "/workspace/data", "readonly": readonly}]})
            assert status == 400, (source, status, resp)
            assert resp["error"]["field"] == "mounts[0].source", resp
            assert named in resp["error"]["message"], (source, resp)
    assert daemon.http("GET", "/v1/sandboxes")[1]["sandboxes"] == []


def test_api_refuses_them_as_an_image_too(daemon, busybox_image):
    """An image given as a host path is chosen by the client as a bind source is: "/" as a sandbox's
    read-only root would show it the host's whole filesystem. Seen failing before the fix: {"image": "/"}
    was 201 Created. An image directory elsewhere still works."""
    for image, named in (("/", "contains"), ("/var/lib/cordon", "/var/lib/cordon"), ("/proc", "/proc")):
        status, resp = daemon.http("POST", "/v1/sandboxes", {"image": image})
        assert status == 400 and resp["error"]["field"] == "image", (image, status, resp)
        assert named in resp["error"]["message"], (image, resp)
    assert daemon.http("GET", "/v1/sandboxes")[1]["sandboxes"] == []
    with Sandbox.create(endpoint=daemon.endpoint, image=busybox_image) as sb:
        assert sb.exec(["cat", "/etc/image-marker"]).stdout == "busybox-image\n"


@pytest.mark.serial  # checks the host for leaks inside the test: no other pass may run
def test_cordon_run_refuses_them_too(shared_dir):
    """Seen failing before the fix: `cordon run --bind /:/host -- ls /host` listed the host's root."""
    for source, named in refused_sources(shared_dir):
        before = HostState.snapshot()
        r = run(["--bind", f"{source}:/host:ro", "--", "ls", "/host"])
        assert r.code == EXIT_CORDON and r.stdout == "", (source, r)
        assert len(r.cordon_lines) == 1 and "mounts[0].source" in r.cordon_lines[0], r.stderr
        assert named in r.cordon_lines[0], r.stderr
        assert not HostState.snapshot().leaks_since(before)


def test_allowed_binds_still_work(daemon, shared_dir, tier):
    data = os.path.join(shared_dir, "data")
    os.mkdir(data)
    with open(os.path.join(data, "in.txt"), "w") as f:
        f.write("from host\n")
    # Named through a symlink: it is resolved, and what it names is bound.
    link = os.path.join(shared_dir, "data-link")
    os.symlink(data, link)
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier,
                        mounts=[{"source": link, "target": "/workspace/data", "readonly": True}]) as sb:
        assert sb.exec(["cat", "/workspace/data/in.txt"]).stdout == "from host\n"
        assert sb.info()["spec"]["mounts"][0]["source"] == data
    r = run(["--bind", f"{link}:/data:ro", "--", "cat", "/data/in.txt"])
    assert (r.code, r.stdout) == (0, "from host\n"), r.stderr


def test_bind_allow_restricts_and_extends(shared_dir):
    """cordond's bind-allow: only the directories named (here one beneath /dev, refused by default,
    and one read-only), nothing else. Seen failing before the fix: cordond did not know the option."""
    shm = tempfile.mkdtemp(prefix="cordon-it-", dir="/dev/shm")
    ro = os.path.join(shared_dir, "ro")
    other = os.path.join(shared_dir, "other")
    for d in (ro, other):
        os.mkdir(d)
    for d in (shm, ro):
        with open(os.path.join(d, "in.txt"), "w") as f:
            f.write(f"from {os.path.basename(d)}\n")
    os.chmod(shm, 0o755)
    d = Daemon(shared_dir, "--bind-allow", shm, "--bind-allow", f"{ro}:ro")
    try:
        def create(source, readonly):
            return d.http("POST", "/v1/sandboxes", {"mounts": [
                {"source": source, "target": "/data", "readonly": readonly}]})

        status, resp = create(shm, False)
        assert status == 201, resp
        sb = Sandbox.connect(resp["id"], endpoint=d.endpoint)
        with sb:
            assert sb.exec(["cat", "/data/in.txt"]).stdout == f"from {os.path.basename(shm)}\n"
        status, resp = create(ro, True)
        assert status == 201, resp
        Sandbox.connect(resp["id"], endpoint=d.endpoint).kill()
        status, resp = create(ro, False)
        assert status == 400 and resp["error"]["field"] == "mounts[0].source", resp
        assert "read-only" in resp["error"]["message"]
        status, resp = create(other, True)
        assert status == 400 and "bind-allow" in resp["error"]["message"], resp
        status, resp = create("/dev/null", True)
        assert status == 400, resp
    finally:
        assert d.stop() == 0, d.output()
        os.unlink(os.path.join(shm, "in.txt"))
        os.rmdir(shm)
    # The same for cordon run.
    r = run(["--bind-allow", f"{ro}:ro", "--bind", f"{ro}:/data:ro", "--", "cat", "/data/in.txt"])
    assert (r.code, r.stdout) == (0, "from ro\n"), r.stderr
    r = run(["--bind-allow", f"{ro}:ro", "--bind", f"{other}:/data:ro", "--", "true"])
    assert r.code == EXIT_CORDON and "bind-allow" in r.stderr, r.stderr


def test_bind_allow_errors_are_reported(shared_dir):
    """A bind-allow naming nothing stops cordond at start, naming the entry."""
    import subprocess
    from cordonlib import CORDOND_BIN
    p = subprocess.run([CORDOND_BIN, "--config", "/dev/null", "--socket", os.path.join(shared_dir, "s.sock"),
                        "--sandbox-dir", os.path.join(shared_dir, "sb"), "--bind-allow", "/no/such/dir"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "/no/such/dir" in p.stderr, (p.returncode, p.stderr)


@pytest.mark.parametrize("tier", ["container", "process"])
def test_a_source_swapped_for_a_symlink_is_not_followed(shared_dir, tier):
    """The source is checked, then bound: a flipper turns it into a symlink to cordon's state in
    between, as a sandbox with that directory bound could. Every run either fails or binds the
    directory itself, never what the symlink names. Seen failing before the fix (with the check,
    without the no-symlink open): a run listed /var/lib/cordon."""
    top = os.path.join(shared_dir, "flip")
    src, alt = os.path.join(top, "src"), os.path.join(top, "alt")
    os.makedirs(src)
    open(os.path.join(src, "marker"), "w").close()
    os.symlink("/var/lib/cordon", alt)
    libc = ctypes.CDLL(None, use_errno=True)
    stop = threading.Event()

    def flip():  # src is the directory, then the symlink, then the directory…: one atomic exchange each
        while not stop.is_set():
            libc.renameat2(-100, src.encode(), -100, alt.encode(), 2)  # AT_FDCWD, RENAME_EXCHANGE

    t = threading.Thread(target=flip, daemon=True)
    t.start()
    seen = {"ok": 0, "refused": 0}
    try:
        for _ in range(40):
            r = run(["--tier", tier, "--bind", f"{src}:/workspace/data:ro", "--", "ls", "/workspace/data"])
            if r.code == 0:
                assert r.stdout.split() == ["marker"], r.stdout  # never cordon's state
                seen["ok"] += 1
            else:
                assert r.code == EXIT_CORDON, r
                seen["refused"] += 1
    finally:
        stop.set()
        t.join()
    assert seen["ok"] > 0, seen  # the directory was bound sometimes: the check did not refuse it all
