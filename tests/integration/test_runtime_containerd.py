"""cordon-runtime under containerd (issue 24, docs/runtime.md): a containerd user switches by naming
the runtime binary of the runc v2 shim (`ctr run --runtime io.containerd.runc.v2 --runc-binary …`).
A containerd of the test's own (its root, state and socket under a temporary directory, no CRI)
runs an OCI image the test writes and imports with `ctr image import`.

What these catch: a task the shim cannot create, start, wait for, signal or delete through
cordon-runtime (its --root, --log json, its own rootfs mount, its `state` polling); an exit status
that is not the command's; a task lost when containerd restarts (the shim keeps it, and asks the
runtime for its state again). The leak check after each test (conftest.py) fails a test that leaves
a container's process, cgroup or mount behind."""

import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time

import pytest

from cordonlib import CORDON_BIN, wait_for
from registry import Layer, OciLayout
from testenv import need

RUNTIME = os.environ.get("CORDON_RUNTIME_BIN") or os.path.join(os.path.dirname(CORDON_BIN), "cordon-runtime")
CONTAINERD, CTR = shutil.which("containerd"), shutil.which("ctr")
IMAGE = "localhost/cordon-test-busybox:v1"


def ID(name):
    """A task id of this process's own: the runc shim keeps the runtime's state under one root for every
    containerd of the host (/run/containerd/runc/<namespace>), which the other pass of tests/run-all
    shares."""
    return f"{name}-{os.getpid()}"


class Containerd:
    """A containerd of its own: started, restarted and stopped by its pid only."""

    def __init__(self, d):
        self.d = d
        self.sock = os.path.join(d, "c.sock")
        self.config = os.path.join(d, "config.toml")
        with open(self.config, "w") as f:
            f.write(f'version = 2\nroot = "{d}/root"\nstate = "{d}/state"\n'
                    f'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n[grpc]\n  address = "{self.sock}"\n')
        self.proc = None

    def start(self):
        self.log = open(os.path.join(self.d, "log"), "ab")
        self.proc = subprocess.Popen([CONTAINERD, "--config", self.config], stdout=self.log, stderr=self.log,
                                     stdin=subprocess.DEVNULL)
        wait_for(lambda: self.ctr("version").returncode == 0, timeout=30, what="containerd to answer")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        self.log.close()

    def ctr(self, *args, timeout=120):
        return subprocess.run([CTR, "--address", self.sock] + list(args), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def run(self, *args, timeout=120):
        """ctr run with cordon-runtime as the shim's runc (options, then image, id and command)."""
        return self.ctr("run", "--runtime", "io.containerd.runc.v2", "--runc-binary", RUNTIME, *args,
                        timeout=timeout)


def busybox_archive(d):
    """An OCI image archive (ctr image import): one layer with a static busybox and its applets."""
    bb = shutil.which("busybox") or "/bin/busybox"
    with open(bb, "rb") as f:
        layer = Layer().dir("bin").file("bin/busybox", f.read(), mode=0o755).dir("etc").dir("tmp", mode=0o1777)
    for applet in ("sh", "echo", "sleep", "id", "cat", "true", "hostname"):
        layer.symlink(f"bin/{applet}", "busybox")
    layer.file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n")
    lay = OciLayout(os.path.join(d, "layout"))
    lay.tag(lay.new_image([layer], config={"Env": ["PATH=/bin"]}), "v1")
    out = os.path.join(d, "image.tar")
    with tarfile.open(out, "w") as t:
        for name in os.listdir(lay.path):
            t.add(os.path.join(lay.path, name), arcname=name)
    return out


@pytest.fixture(scope="module")
def ctd():
    need(CONTAINERD and CTR, "containerd and ctr (tests/run-all installs Debian's)")
    d = tempfile.mkdtemp(prefix="cdn-ctd-", dir="/tmp")  # the socket's path must be short
    c = Containerd(d)
    c.start()
    try:
        r = c.ctr("image", "import", "--base-name", "localhost/cordon-test-busybox", busybox_archive(d))
        assert r.returncode == 0 and c.ctr("image", "ls", "-q").stdout.split() == [IMAGE], r
        yield c
    finally:
        for task in c.ctr("task", "ls", "-q").stdout.split():
            c.ctr("task", "kill", "-s", "KILL", task)
            c.ctr("task", "delete", "-f", task)
        for cont in c.ctr("container", "ls", "-q").stdout.split():
            c.ctr("container", "delete", cont)
        c.stop()
        shutil.rmtree(d, ignore_errors=True)


def test_ctr_run_prints_and_exits_with_the_command_s_status(ctd):
    r = ctd.run("--rm", IMAGE, ID("t1"), "sh", "-c", "echo hello as $(id -u); cat /proc/self/uid_map; exit 4")
    assert r.returncode == 4, r
    lines = r.stdout.splitlines()
    assert lines[0] == "hello as 0", r.stdout
    uid_map = lines[1].split()
    assert uid_map[0] == "0" and int(uid_map[1]) >= 2**30, uid_map  # root inside is an unprivileged host uid
    r = ctd.run("--rm", IMAGE, ID("t2"), "no-such-program")
    assert r.returncode != 0 and "executable file not found" in r.stderr, r


def test_ctr_task_kill_and_delete(ctd):
    assert ctd.run("-d", IMAGE, ID("k1"), "sleep", "1000").returncode == 0
    assert "RUNNING" in ctd.ctr("task", "ls").stdout
    assert ctd.ctr("task", "kill", ID("k1")).returncode == 0  # SIGTERM, passed to sleep by init
    wait_for(lambda: "STOPPED" in ctd.ctr("task", "ls").stdout, timeout=10, what="the task to stop")
    r = ctd.ctr("task", "delete", ID("k1"))
    assert r.returncode == 0 and "143" in r.stderr + r.stdout, r  # ctr reports the exit status
    assert ctd.ctr("container", "delete", ID("k1")).returncode == 0


def test_a_task_outlives_containerd_s_restart(ctd):
    assert ctd.run("-d", IMAGE, ID("r1"), "sleep", "1000").returncode == 0
    pid = int(ctd.ctr("task", "ls").stdout.split("\n")[1].split()[1])
    ctd.stop()
    time.sleep(0.5)
    assert os.path.exists(f"/proc/{pid}"), "the task died with containerd"
    ctd.start()
    ls = ctd.ctr("task", "ls").stdout
    assert ID("r1") in ls and str(pid) in ls and "RUNNING" in ls, ls
    assert ctd.ctr("task", "kill", "-s", "KILL", ID("r1")).returncode == 0
    wait_for(lambda: "STOPPED" in ctd.ctr("task", "ls").stdout, timeout=10, what="the task to stop")
    assert ctd.ctr("task", "delete", ID("r1")).returncode == 0
    assert ctd.ctr("container", "delete", ID("r1")).returncode == 0


def test_ctr_exec_ps_pause_and_resume(ctd):
    assert ctd.run("-d", IMAGE, ID("x1"), "sleep", "1000").returncode == 0
    try:
        r = ctd.ctr("task", "exec", "--exec-id", ID("e1"), ID("x1"), "sh", "-c", "id -u; exit 6")
        assert r.returncode == 6 and r.stdout == "0\n", r
        ps = ctd.ctr("task", "ps", ID("x1")).stdout.split()
        assert len(ps) >= 3 and ps[0] == "PID", ps  # init and sleep, by their host pids
        assert ctd.ctr("task", "pause", ID("x1")).returncode == 0
        assert "PAUSED" in ctd.ctr("task", "ls").stdout
        assert ctd.ctr("task", "resume", ID("x1")).returncode == 0
        assert "RUNNING" in ctd.ctr("task", "ls").stdout
    finally:
        ctd.ctr("task", "kill", "-s", "KILL", ID("x1"))
        wait_for(lambda: "STOPPED" in ctd.ctr("task", "ls").stdout, timeout=10, what="the task to stop")
        ctd.ctr("task", "delete", ID("x1"))
        ctd.ctr("container", "delete", ID("x1"))
