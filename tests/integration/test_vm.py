"""What is particular to the vm tier (issue 6): `cordon run --tier vm` boots a QEMU q35 machine
with the guest kernel of `cordon vm prepare` and the image's disk; the image's own init (systemd)
starts cordon-init as the agent, which runs the commands confined as in a microvm. The image is
the host's (its skeleton as a disk, the host's /usr over 9p), an image directory, or a disk image
file (raw or qcow2) that the guest writes through QEMU's snapshot of it, never to the file. What
every tier does (exec, streaming, files, limits, egress, events, violations, restarts) is tested
over the `tier` fixture (the tests of conftest.VM_TIER_TESTS); the escape probes in
tests/security run in it too."""

import hashlib
import os
import platform
import shutil
import subprocess

import pytest

import cordonlib
from cordonlib import guest_release, run

# It counts the QEMU processes on the host: it has the host to itself (tests/suitelock.py).
pytestmark = [pytest.mark.needs_vm, pytest.mark.serial]


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def qemus():
    return [p for p in cordonlib.all_procs() if p.comm.startswith("qemu-system") and p.state != "Z"]


SYSTEMD_STARTED_THE_AGENT = "Started cordon-agent.service"


def test_the_host_image_boots_its_own_systemd():
    """The default image: the guest's init is systemd (the host's, from its /usr), which starts the
    agent (its console, on stderr with CORDON_VM_DEBUG, says so); the commands' pid 1 is the agent (their
    pid namespace holds none of the system's processes); they are confined as in a container (their
    own cgroup, a read-only root, writable /tmp) and the kernel is the guest's."""
    script = ("uname -r; cat /proc/1/comm; cat /proc/self/cgroup; touch /new 2>/dev/null || echo ro; "
              "echo w > /tmp/w && cat /tmp/w; id -un")
    r = run(["--json", "--tier", "vm", "--", "sh", "-c", script], timeout=180,
            env=dict(os.environ, CORDON_VM_DEBUG="1"))
    assert r.code == 0, r
    assert r.stdout.splitlines() == [guest_release(), "init", "0::/cmds", "ro", "w", "root"], r
    assert SYSTEMD_STARTED_THE_AGENT in r.stderr
    assert guest_release() != platform.release()
    assert r.record["tier"] == "vm" and r.record["accel"] in ("kvm", "tcg"), r.record


def ext4_disk(src, path, mb=64):
    with open(path, "wb") as f:
        f.truncate(mb << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-d", src, path], check=True)


@pytest.mark.parametrize("fmt", ["raw", "qcow2"])
def test_a_disk_image_file_is_the_root_and_never_changes(busybox_image, tmp_path, fmt):
    """A raw ext4 disk, or a qcow2 of it: the guest mounts it as its root. The busybox image has no
    systemd, so cordon-init stays the guest's first process (`init`). The guest writes (the agent's own
    files at boot; /tmp) go to QEMU's snapshot in the sandbox's run directory, which goes with it
    (no_leaks): the file is the same afterwards."""
    disk = str(tmp_path / "root.raw")
    ext4_disk(busybox_image, disk)
    if fmt == "qcow2":
        cordonlib.need(shutil.which("qemu-img"), "no qemu-img (install qemu-utils)")
        subprocess.run(["qemu-img", "convert", "-O", "qcow2", disk, disk + ".qcow2"], check=True)
        disk += ".qcow2"
    before = digest(disk)
    script = ("cat /etc/image-marker; cat /proc/1/comm; uname -r; echo hi > /tmp/x && cat /tmp/x; "
              "touch /new-file 2>/dev/null || echo ro")
    r = run(["--tier", "vm", "--image", disk, "--", "sh", "-c", script], timeout=180)
    assert r.code == 0, r
    assert r.stdout.splitlines() == ["busybox-image", "init", guest_release(), "hi", "ro"], r
    assert digest(disk) == before


def test_bad_disk_images_are_refused_naming_the_field(tmp_path):
    junk = tmp_path / "junk.img"
    junk.write_bytes(b"not a disk" * 1000)
    r = run(["--tier", "vm", "--image", str(junk), "--", "true"], timeout=60)
    assert r.code == 125 and "field: image" in r.stderr and "neither a qcow2" in r.stderr, r
    r = run(["--tier", "vm", "--image", str(tmp_path / "nope.qcow2"), "--", "true"], timeout=60)
    assert r.code == 125 and "field: image" in r.stderr, r
    assert qemus() == []


def test_cordond_runs_a_full_vm(daemon):
    """Through the API: a cold boot (there is no snapshot of a whole system), the spec's hostname and
    workdir, and the guest's machine-id, not the image's."""
    from cordon import Sandbox
    sb = Sandbox.create(endpoint=daemon.endpoint, tier="vm", hostname="vm-a", workdir="/srv/work")
    try:
        info = sb.info()
        assert info["tier"] == "vm" and info["vm"]["boot"] == "cold", info
        r = sb.exec("hostname; pwd; cat /etc/machine-id")
        host, cwd, mid = r.stdout.split()
        assert (host, cwd) == ("vm-a", "/srv/work") and len(mid) == 32, r
    finally:
        sb.kill()
    cordonlib.wait_for(lambda: qemus() == [], timeout=10, what="the QEMU's exit")


DEBOOTSTRAP_DISK = os.environ.get("CORDON_TEST_VM_DISK", "")


def test_a_debootstrap_image_boots_its_systemd():
    """The disk `cordon image build DIR --disk FILE` makes (Debian minbase with systemd): its own
    systemd is the guest's init and starts the agent, its own userland runs the commands, and the file
    never changes."""
    cordonlib.need(os.path.exists(DEBOOTSTRAP_DISK),
                   "no disk made by `cordon image build` (CORDON_TEST_VM_DISK; tests/run-all makes one)")
    before = digest(DEBOOTSTRAP_DISK)
    script = ". /etc/os-release; echo $VERSION_CODENAME; dpkg -s systemd | grep -c installed"
    r = run(["--tier", "vm", "--image", DEBOOTSTRAP_DISK, "--", "sh", "-c", script], timeout=180,
            env=dict(os.environ, CORDON_VM_DEBUG="1"))
    assert r.code == 0, r
    assert r.stdout.split() == ["bookworm", "1"], r
    assert SYSTEMD_STARTED_THE_AGENT in r.stderr
    assert digest(DEBOOTSTRAP_DISK) == before


def test_image_build_refuses_bad_arguments(tmp_path):
    """Checked before debootstrap runs (nothing is downloaded here)."""
    cases = [(["relative"], "absolute path"),
             ([str(tmp_path)], "exists already"),
             ([str(tmp_path / "new"), "--disk", "rel.raw"], "--disk 'rel.raw': must be an absolute path"),
             ([str(tmp_path / "new"), "--disk-size", "abc"], "--disk-size 'abc'"),
             ([str(tmp_path / "new"), "--bogus", "x"], "usage: cordon image")]
    for args, message in cases:
        p = subprocess.run([cordonlib.CORDON_BIN, "image", "build", *args], capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 125 and message in p.stderr, (args, p.stderr)
    assert not (tmp_path / "new").exists()


def test_commands_cannot_end_the_agent_nor_see_the_system(daemon):
    """The agent is the first process of a pid namespace of its own, as a microvm's init is: a command
    that sends SIGKILL to every process it can see leaves it running (the next exec works, and the
    protected path stays refused), and sees none of the system's processes (systemd, journald, udev).
    Seen failing while the agent shared the system's pid namespace: the command saw systemd, and the same
    kill loop ended the agent (`cordon run` then said: the sandbox ended without reporting an exit
    status)."""
    from cordon import Sandbox
    sb = Sandbox.create(endpoint=daemon.endpoint, tier="vm", protect=["/etc/hostname"])
    try:
        seen = sb.exec("for p in /proc/[0-9]*; do cat $p/comm; done").stdout.split()
        assert "systemd" not in seen and "systemd-journal" not in seen, seen
        r = sb.exec("for p in /proc/[0-9]*; do n=${p#/proc/}; [ $n = $$ ] || kill -9 $n 2>/dev/null; done; "
                    "kill -STOP 1; echo still")
        assert r.stdout == "still\n", r
        r = sb.exec("cat /etc/hostname || echo refused")
        assert r.stdout.endswith("refused\n"), r
    finally:
        sb.kill()
    cordonlib.wait_for(lambda: qemus() == [], timeout=10, what="the QEMU's exit")


def test_what_a_killed_run_left_is_swept_by_the_next_create(busybox_image, tmp_path):
    """`cordon run` killed with SIGKILL cannot tear down: its QEMU ends with it, but the guest's
    cgroup and a full VM's run directory (the disk's snapshot) stay. The next create of a VM tier
    removes them once they are 10 s old (before that they could be a create's that is under way)."""
    import signal
    import time
    disk = str(tmp_path / "root.raw")
    ext4_disk(busybox_image, disk)
    p = subprocess.Popen([cordonlib.CORDON_BIN, "run", "--tier", "vm", "--image", disk, "--", "sleep", "120"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cordonlib.wait_for(lambda: qemus() and os.listdir(os.path.join(cordonlib.VM_DIR, "run")), timeout=60,
                           what="the guest's QEMU and run directory")
        started = time.monotonic()
        runs = os.listdir(os.path.join(cordonlib.VM_DIR, "run"))
    finally:
        p.send_signal(signal.SIGKILL)  # ours, by PID
        p.wait()
    cordonlib.wait_for(lambda: qemus() == [], timeout=10, what="the QEMU's end with its cordon")
    (sid,) = runs
    left = [d for d in cordonlib.cgroup_dirs() if d.endswith("vm-" + sid)]
    assert left and os.path.isdir(os.path.join(cordonlib.VM_DIR, "run", sid)), (left, runs)
    time.sleep(max(0.0, 11 - (time.monotonic() - started)))
    r = run(["--tier", "microvm", "--", "true"], timeout=120)
    assert r.code == 0, r
    assert not [d for d in cordonlib.cgroup_dirs() if d.endswith("vm-" + sid)]
    assert not os.path.exists(os.path.join(cordonlib.VM_DIR, "run", sid))


def test_a_warm_pool_of_full_vms_hands_them_over(shared_dir):
    """cordond's warm pool works for tier vm too: a pooled guest has booted its system and run one
    command before it counts as ready, so a create of the same shape is a hand-over, not an 8 s boot."""
    import json
    import time
    from cordon import Sandbox
    spec = os.path.join(shared_dir, "vm-pool.json")
    with open(spec, "w") as f:
        json.dump({"tier": "vm"}, f)
    d = cordonlib.Daemon(shared_dir, "--pool", f"1:{spec}")
    try:
        def ready():
            status, text = d.http("GET", "/metrics")
            return status == 200 and b"cordon_pool_size 1\n" in text
        # booted, its warm-up command run (about 8 s here under TCG)
        cordonlib.wait_for(ready, timeout=120, what="the pool's guest to be ready")
        t = time.monotonic()
        sb = Sandbox.create(endpoint=d.endpoint, tier="vm")
        handover_s = time.monotonic() - t
        try:
            assert "handed_over" in [e["type"] for e in sb.events()]
            assert sb.info()["vm"]["boot"] == "cold"
            assert sb.exec("uname -r").stdout.strip() == guest_release()
        finally:
            sb.kill()
        assert handover_s < 2, handover_s
    finally:
        assert d.stop() == 0
    cordonlib.wait_for(lambda: qemus() == [], timeout=10, what="the QEMUs' exit")
