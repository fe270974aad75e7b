"""cordon-runtime under podman (issue 24, docs/runtime.md): a podman user switches by naming the
runtime. podman (Debian's 4.3) runs an image the test imports (no registry) with --runtime pointing
at cordon-runtime, in a storage of its own (--root/--runroot under the test's directory), cgroupfs.

What these catch: a container podman cannot run through cordon-runtime (its overlay root, its binds
under 0700 directories, its netns); exit codes that are not runc's (127 for a missing program, 126
for one that cannot run, 128+N for a signal); stop and kill that do not reach the command; limits
podman passes that are not enforced; a network podman made that the container does not get. Shown
once: without the overlay of idmapped layers (tiers/container/root-layers.c) every run fails with
"root.path … its file system cannot be idmapped"; without the bind clones, with "mounts[0]: --bind
source … cannot search /var/lib/containers". The leak check after each test (conftest.py) fails a
test whose container leaves a process, cgroup, mount, link or named netns behind."""

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time

import pytest

from cordonlib import CORDON_BIN, build_busybox_image
from testenv import need, release_podman_storage

RUNTIME = os.environ.get("CORDON_RUNTIME_BIN") or os.path.join(os.path.dirname(CORDON_BIN), "cordon-runtime")
PODMAN = shutil.which("podman")
IMAGE = "localhost/cordon-test-busybox:1"


class Podman:
    def __init__(self, d, runroot):
        self.base = [PODMAN, "--root", os.path.join(d, "storage"), "--runroot", runroot,
                     "--cgroup-manager", "cgroupfs", "--events-backend", "file", "--runtime", RUNTIME]
        self.d = d

    def __call__(self, *args, timeout=120, runtime=None):
        argv = list(self.base)
        if runtime:
            argv[argv.index("--runtime") + 1] = runtime
        return subprocess.run(argv + list(args), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def run(self, *args, **kw):
        """podman run --rm of IMAGE with args (options, then the command)."""
        return self("run", "--rm", *args, **kw)


@pytest.fixture(scope="module")
def podman(tmp_path_factory):
    need(PODMAN, "podman (tests/run-all installs Debian's)")
    d = str(tmp_path_factory.mktemp("podman"))
    rootfs = os.path.join(d, "rootfs")
    build_busybox_image(rootfs)
    os.chmod(rootfs, 0o755)
    tar = os.path.join(d, "image.tar")
    with tarfile.open(tar, "w") as t:
        t.add(rootfs, arcname=".")
    runroot = tempfile.mkdtemp(prefix="cdn-pm-", dir="/tmp")  # podman takes at most 50 characters
    p = Podman(d, runroot)
    r = p("import", "-q", tar, IMAGE)
    assert r.returncode == 0, r
    # The storage's own mount (its overlay directory bound on itself) is made by a podman command
    # and undone by the last one that leaves no container layer mounted: a container kept running
    # for the module keeps it, so that it is there before any test's leak check looks.
    r = p("run", "-d", "--name", "keep", "--network", "none", IMAGE, "sleep", "100000")
    assert r.returncode == 0, r
    yield p
    p("rm", "-af", "-t", "0")
    p("rmi", "-af")
    # containers/storage binds its overlay directory on itself (private): ours to undo.
    release_podman_storage(os.path.join(d, "storage"), runroot)


def test_run_rm_prints_and_exits_as_with_runc(podman):
    r = podman.run(IMAGE, "sh", "-c", "echo hello from $(hostname) as $(id -u); cat /proc/self/uid_map")
    assert r.returncode == 0, r
    first, uid_map = r.stdout.splitlines()[0], r.stdout.split("\n")[1].split()
    assert first.startswith("hello from ") and first.endswith(" as 0"), r.stdout
    assert uid_map[0] == "0" and int(uid_map[1]) >= 2**30, uid_map  # root inside is an unprivileged host uid
    for cmd, status in [(["sh", "-c", "exit 3"], 3), (["sh", "-c", "kill -9 $$"], 137),
                        (["no-such-program"], 127), (["/etc/passwd"], 126)]:
        r = podman.run(IMAGE, *cmd)
        assert r.returncode == status, (cmd, r)
    r = podman.run(IMAGE, "no-such-program")
    assert "executable file not found" in r.stderr, r


def test_the_root_is_podman_s_container_layer(podman):
    """What the container writes is in podman's container layer (podman cp reads it back after the
    container stopped), owned as written inside: its root's files are uid 0's."""
    r = podman("run", "--name", "w1", IMAGE, "sh", "-c", "echo written > /etc/made && ls -ln /etc/made")
    assert r.returncode == 0 and " 0 " in r.stdout, r
    out = os.path.join(podman.d, "made")
    r = podman("cp", "w1:/etc/made", out)
    assert r.returncode == 0 and open(out).read() == "written\n", r
    assert podman("rm", "w1").returncode == 0


def test_detached_ps_stop_and_kill(podman):
    r = podman("run", "-d", "--name", "d1", "--network", "none", IMAGE, "sleep", "1000")
    assert r.returncode == 0, r
    ps = podman("ps", "--format", "{{.Names}} {{.Status}}").stdout
    assert "d1 Up" in ps, ps
    assert podman("stop", "-t", "5", "d1").returncode == 0  # SIGTERM reaches sleep through init
    st = json.loads(podman("inspect", "d1").stdout)[0]["State"]
    assert st["Status"] == "exited" and st["ExitCode"] == 143, st
    assert podman("rm", "d1").returncode == 0
    assert podman("run", "-d", "--name", "d2", "--network", "none", IMAGE, "sleep", "1000").returncode == 0
    assert podman("kill", "d2").returncode == 0
    podman("wait", "d2")
    st = json.loads(podman("inspect", "d2").stdout)[0]["State"]
    assert st["ExitCode"] == 137, st
    assert podman("rm", "d2").returncode == 0


def test_memory_and_pids_limits_are_enforced(podman):
    # tail keeps the whole of a line that never ends: 200 MiB of zeros against 64 MiB
    for memory, status in [("64m", 137), ("512m", 0)]:  # the OOM killer, and the same with room
        r = podman.run("--memory", memory, "--network", "none", IMAGE, "sh", "-c",
                       "head -c 200000000 /dev/zero | tail > /dev/null")
        assert r.returncode == status, (memory, r)
    r = podman.run("--pids-limit", "20", "--network", "none", IMAGE, "sh", "-c",
                   "for i in $(seq 1 40); do sleep 5 & done; echo done")
    assert "can't fork" in r.stderr, r
    # --ulimit lowers cordon's rlimits (never raises them): the process and an exec both get it
    r = podman("run", "-d", "--name", "u1", "--ulimit", "nofile=300:300", "--network", "none", IMAGE, "sleep", "1000")
    assert r.returncode == 0, r
    try:
        assert podman("exec", "u1", "sh", "-c", "ulimit -n").stdout == "300\n"
        r = podman.run("--ulimit", "nofile=300:300", "--network", "none", IMAGE, "sh", "-c", "ulimit -n")
        assert r.stdout == "300\n", r
    finally:
        podman("rm", "-f", "-t", "0", "u1")


def test_network_none_and_podman_s_network(podman):
    r = podman.run("--network", "none", IMAGE, "sh", "-c", "ls /sys/class/net 2>/dev/null || ip -o link")
    assert r.returncode == 0 and "eth0" not in r.stdout and "lo" in r.stdout, r
    r = podman.run(IMAGE, "ip", "-4", "-o", "addr")
    assert r.returncode == 0 and "eth0" in r.stdout and "inet 10.88." in r.stdout, r  # podman's bridge network


def test_exec_runs_confined_beside_the_command(podman):
    """podman exec (conmon: runtime exec --detach --process FILE --pid-file FILE): the process joins
    the container, is confined as its first process is (no capability, no_new_privs, seccomp), and its
    exit status and stdout come back through conmon."""
    assert podman("run", "-d", "--name", "x1", "--network", "none", IMAGE, "sleep", "1000").returncode == 0
    try:
        r = podman("exec", "x1", "sh", "-c", "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status;"
                   " cat /proc/self/uid_map; ps -o pid,comm")
        assert r.returncode == 0, r
        assert "CapEff:\t0000000000000000" in r.stdout and "CapBnd:\t0000000000000000" in r.stdout, r.stdout
        assert "NoNewPrivs:\t1" in r.stdout and "Seccomp:\t2" in r.stdout, r.stdout
        assert int(r.stdout.split("\n")[4].split()[1]) >= 2**30, r.stdout  # in the container's user namespace
        assert "sleep" in r.stdout and "cordon-init" in r.stdout, r.stdout  # and its pid namespace
        assert podman("exec", "x1", "sh", "-c", "exit 5").returncode == 5
        assert podman("exec", "x1", "no-such-program").returncode == 127
        r = podman("exec", "--user", "1000:1000", "-e", "FOO=bar", "x1", "sh", "-c", "echo $(id -u):$(id -g) $FOO")
        assert r.returncode == 0 and r.stdout == "1000:1000 bar\n", r
        r = podman("exec", "-t", "x1", "sh", "-c", "test -t 0 && test -t 1 && echo on a terminal; exit 4")
        assert r.returncode == 4 and "on a terminal" in r.stdout, r
    finally:
        podman("rm", "-f", "-t", "0", "x1")


def test_pause_unpause_and_top(podman):
    assert podman("run", "-d", "--name", "p1", "--network", "none", IMAGE, "sh", "-c",
                  "while true; do echo x >> /tmp/ticks; sleep 0.05; done").returncode == 0
    try:
        assert podman("pause", "p1").returncode == 0
        st = json.loads(podman("inspect", "p1").stdout)[0]["State"]
        assert st["Status"] == "paused", st
        size = os.path.getsize(podman_file(podman, "p1", "/tmp/ticks"))
        time.sleep(0.5)
        assert os.path.getsize(podman_file(podman, "p1", "/tmp/ticks")) == size  # frozen: no tick
        assert podman("unpause", "p1").returncode == 0
        time.sleep(0.5)
        assert os.path.getsize(podman_file(podman, "p1", "/tmp/ticks")) > size
        top = podman("top", "p1").stdout
        assert "cordon-init" in top and "while true" in top, top
    finally:
        podman("rm", "-f", "-t", "0", "p1")


def podman_file(podman, name, path):
    """A file of the container as podman's storage holds it (its mounted root)."""
    merged = podman("mount", name).stdout.strip()
    return os.path.join(merged, path.lstrip("/"))


def test_a_terminal_with_run_t_and_it(podman):
    """podman run -t: the process's stdio is a terminal whose master conmon got through the console
    socket, and it is the controlling terminal of the process's session (job control works); -it
    under script(1), as a user types: input reaches the shell, its exit status comes back."""
    r = podman("run", "--rm", "-t", "--network", "none", IMAGE, "sh", "-c",
               "test -t 0 && test -t 1 && echo on a terminal; exit 3")
    assert r.returncode == 3 and "on a terminal" in r.stdout, r
    r = subprocess.run(["script", "-qec", " ".join(podman.base + ["run", "--rm", "-it", "--network", "none", IMAGE,
                                                                    "sh"]), "/dev/null"],
                       input="echo typed-$((6*7))\nexit 5\n", capture_output=True, text=True, timeout=120)
    assert "typed-42" in r.stdout and r.returncode == 5, r


def test_a_container_with_its_own_id_range(podman):
    """podman --uidmap (a pod's hostUsers: false is the same to the runtime): the container's ids are
    the range podman gave it, not cordon's slot's, so what it writes is owned on disk as podman expects
    and podman cp, exec and the layer ids agree. Shown once: before this the bundle's mappings were
    refused; with the range idmapped onto the slot's, podman cp failed ("host ID … cannot be mapped").
    podman's layers are its own idmapped views (<id>/mapped/0, gone after its mount): read from 0."""
    m = ["--uidmap", "0:300000:65536", "--gidmap", "0:300000:65536"]
    r = podman.run(*m, IMAGE, "sh", "-c", "cat /proc/self/uid_map; stat -c %u /bin/busybox")
    assert r.returncode == 0 and r.stdout.split() == ["0", "300000", "65536", "0"], r
    r = podman("run", "-d", *m, "--name", "ranged", "--network", "none", IMAGE, "sh", "-c",
               "echo hi > /etc/hello; sleep 1000")
    assert r.returncode == 0, r
    try:
        root = podman("mount", "ranged").stdout.strip()
        wait_for_file = os.path.join(root, "etc", "hello")
        deadline = time.monotonic() + 30
        while not os.path.exists(wait_for_file) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.stat(wait_for_file).st_uid == 300000  # the range's root, on disk
        r = podman("exec", "ranged", "sh", "-c", "cat /etc/hello; grep -c 300000 /proc/self/uid_map")
        assert r.returncode == 0 and r.stdout.split() == ["hi", "1"], r
        r = podman("cp", "ranged:/etc/hello", "-")
        assert r.returncode == 0 and "hi" in r.stdout, r
    finally:
        podman("rm", "-f", "-t", "0", "ranged")
