"""What is particular to the microvm tier (issue 6): `cordon run --tier microvm`
boots the Debian guest kernel (QEMU -M microvm, PVH, cordon-init as the
guest's first process, the agent over virtio-serial) or restores it from a
snapshot, and runs the command in it. Under TCG here (no hardware
virtualisation on this host), KVM where there is. What every tier does
(exec, streaming, files, lifetimes, restarts, egress) is tested over the
`tier` fixture in test_daemon.py, test_daemon_restart.py and test_egress.py.
The guest kernel and initramfs come from `cordon vm prepare` (install.sh runs
it; these tests never download anything: cordonlib sets CORDON_VM_DIR)."""

import json
import os
import platform
import shutil
import time

import pytest

import cordonlib
from cordonlib import guest_release, run
from testenv import hw_virt

# It counts the QEMU processes that appear on the host: it has the host to itself (tests/suitelock.py).
pytestmark = [pytest.mark.needs_vm, pytest.mark.serial]


_before = set()


@pytest.fixture(autouse=True)
def _qemus_before():
    """QEMU processes that were there before the test (not ours to count)."""
    _before.clear()
    _before.update(p.pid for p in cordonlib.all_procs() if p.comm.startswith("qemu-system"))


def qemus():
    """QEMU processes the test left (zombies of others' aside)."""
    return [p for p in cordonlib.all_procs()
            if p.comm.startswith("qemu-system") and p.pid not in _before and p.state != "Z"]


@pytest.mark.parametrize("boot", ["snapshot", "cold"])
def test_uname_is_the_guests(boot):
    env = dict(os.environ, CORDON_VM_BOOT=boot)
    r = run(["--json", "--tier", "microvm", "--", "uname", "-r"], timeout=120, env=env)
    assert r.code == 0, r
    assert r.stdout.strip() == guest_release() != platform.release()
    assert qemus() == []


def test_snapshot_clones_have_their_own_identity():
    """Guests restored from one snapshot share its memory, so without the IDENTITY frame they
    would share their random state and machine-id too (tried once: without RNDRESEEDCRNG every
    clone printed the same urandom bytes)."""
    script = "cat /etc/machine-id; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; date +%s; hostname"
    outs = []
    for _ in range(3):
        r = run(["--tier", "microvm", "--hostname", "guest-x", "--", "sh", "-c", script], timeout=120)
        assert r.code == 0, r
        outs.append(r.stdout.split("\n"))
    assert len({o[0] for o in outs}) == 3 and all(len(o[0]) == 32 for o in outs), outs  # machine-id
    assert len({o[1] for o in outs}) == 3, outs  # random bytes
    import time
    assert all(abs(int(o[2]) - time.time()) < 30 for o in outs), outs  # the clock is now, not the snapshot's
    assert {o[3] for o in outs} == {"guest-x"}


def test_output_status_and_record():
    r = run(["--json", "--tier", "microvm", "--", "sh", "-c", "echo out; echo err >&2; exit 3"], timeout=120)
    assert (r.code, r.stdout, r.stderr.splitlines()[0]) == (3, "out\n", "err"), r
    rec = r.record
    assert rec["tier"] == "microvm" and rec["exit_code"] == 3
    assert rec["accel"] in ("kvm", "tcg")
    if not os.access("/dev/kvm", os.W_OK) or " vmx" not in open("/proc/cpuinfo").read() and \
            " svm" not in open("/proc/cpuinfo").read():
        assert rec["accel"] == "tcg"  # no hardware virtualisation: QEMU's TCG


def test_cpus_and_memory_are_the_guests():
    r = run(["--tier", "microvm", "--cpus", "2", "--memory", "256M", "--", "sh", "-c",
             "nproc; grep MemTotal /proc/meminfo"], timeout=120)
    assert r.code == 0, r
    lines = r.stdout.split("\n")
    assert lines[0] == "2"
    # The guest has the limit plus 64 MiB for its kernel, init and page cache; its commands' cgroup
    # has the limit (test_limits.py runs the OOM tests in a microvm too).
    kib = int(lines[1].split()[1])
    assert 230 * 1024 < kib <= 320 * 1024, lines[1]


def test_timeout_ends_the_guest():
    r = run(["--tier", "microvm", "--timeout", "8s", "--", "sleep", "100"], timeout=120)
    assert r.code == 124, r
    cordonlib.wait_for(lambda: qemus() == [], timeout=5, what="QEMU's exit")


def test_an_image_directory_is_the_guests_root(busybox_image, daemon):
    """--image DIR: an erofs disk made once from the directory, the root of the guest (under an
    overlay), read-only but for the disk's directories; the directory itself never changes. Through
    `cordon run` and through cordond (from the image's own snapshot); a second image directory gets
    its own disk."""
    from cordon import Sandbox
    before = sorted(os.listdir(busybox_image))
    script = ("cat /etc/image-marker; test -e /usr/bin/python3 && echo has-python; uname -r; "
              "echo hi > /tmp/x && cat /tmp/x; touch /new-file 2>/dev/null || echo ro; rm -f /bin/ls || echo ro")
    r = run(["--tier", "microvm", "--image", busybox_image, "--", "sh", "-c", script], timeout=180)
    assert r.code == 0, r
    assert r.stdout.splitlines() == ["busybox-image", guest_release(), "hi", "ro", "ro"], r
    sb = Sandbox.create(endpoint=daemon.endpoint, tier="microvm", image=busybox_image)
    try:
        assert sb.info()["vm"]["boot"] == "snapshot"
        assert sb.exec("cat /etc/image-marker; ls /usr/bin/python3 || echo none").stdout.split() == [
            "busybox-image", "none"]
        sb.files.write("/tmp/f", b"in the guest")
        assert sb.files.read("/tmp/f") == b"in the guest"
    finally:
        sb.kill()
    assert sorted(os.listdir(busybox_image)) == before
    with open(os.path.join(busybox_image, "etc", "image-marker")) as f:
        assert f.read() == "busybox-image\n"
    other = busybox_image + "-other"
    shutil.copytree(busybox_image, other, symlinks=True)
    try:
        with open(os.path.join(other, "etc", "image-marker"), "w") as f:
            f.write("other-image\n")
        r = run(["--tier", "microvm", "--image", other, "--", "cat", "/etc/image-marker"], timeout=180)
        assert r.code == 0 and r.stdout == "other-image\n", r
    finally:
        shutil.rmtree(other)
    cordonlib.wait_for(lambda: qemus() == [], timeout=10, what="the QEMUs' exit")


def test_a_bad_image_is_refused_naming_it(shared_dir):
    r = run(["--tier", "microvm", "--image", os.path.join(shared_dir, "nope"), "--", "true"], timeout=60)
    assert r.code == 125 and "field: image" in r.stderr, r
    assert qemus() == []


def test_a_missing_protected_path_fails_the_create(daemon):
    """The guest expands the patterns: a literal that is not there is the create's 400 (the
    guest, half set up, ends itself rather than run commands unprotected)."""
    status, body = daemon.http("POST", "/v1/sandboxes", {"tier": "microvm", "protect": ["/workspace/nope"]})
    assert status == 400 and body["error"]["field"] == "protect", body
    assert "/workspace/nope" in body["error"]["message"] or "No such file" in body["error"]["message"], body
    cordonlib.wait_for(lambda: qemus() == [], timeout=10, what="the guest's end")


def test_cordond_runs_it_from_the_snapshot(daemon):
    """Through the API: the guest is restored, says what runs it, and gets the spec's hostname,
    workdir and a machine-id of its own."""
    from cordon import Sandbox
    a = Sandbox.create(endpoint=daemon.endpoint, tier="microvm", hostname="vm-a", workdir="/srv/work")
    b = Sandbox.create(endpoint=daemon.endpoint, tier="microvm")
    try:
        info = a.info()
        assert info["vm"] == {"accel": "kvm" if hw_virt() else "tcg", "boot": "snapshot"}, info
        r = a.exec("hostname; pwd; uname -r; cat /etc/machine-id")
        host, cwd, release, mid_a = r.stdout.split()
        assert (host, cwd, release) == ("vm-a", "/srv/work", guest_release()), r
        assert b.exec("cat /etc/machine-id").stdout.strip() != mid_a
    finally:
        a.kill()
        b.kill()
    cordonlib.wait_for(lambda: qemus() == [], timeout=5, what="the QEMUs' exit")  # DELETE does not wait


FAKE_QEMU = """#!/bin/sh
# Says its arguments on stderr (QEMU runs jailed: no path of the test's is there; CORDON_VM_DEBUG
# passes QEMU's stderr through); a KVM guest "does not come up" (exits), anything else runs the real QEMU.
printf 'fake-qemu: %s\\n' "$*" >&2
case "$*" in *accel=kvm*) exit 1 ;; esac
exec /usr/bin/qemu-system-x86_64 "$@"
"""


def test_each_accelerator_gets_its_configuration_and_a_failed_kvm_falls_back(tmp_path):
    """Both accelerators' QEMU command lines, whatever this host has: KVM gets `accel=kvm` and the
    host's CPU model; TCG gets `accel=tcg`, `-cpu max` and the TSC frequency (without which one boot
    in eight hangs). With CORDON_VM_ACCEL=probe cordon tries a KVM guest first, as it does on a host
    whose CPU has VMX/SVM: this one "fails" (the fake QEMU exits), so the run falls back to TCG, says
    so, and records it for this boot. (This host's real KVM is never tried: its guests hang QEMU.)"""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "qemu-system-x86_64").write_text(FAKE_QEMU)
    (fake / "qemu-system-x86_64").chmod(0o755)
    vmdir = tmp_path / "vm"
    shutil.copytree(cordonlib.VM_DIR, vmdir, ignore=shutil.ignore_patterns("snap-*", "images", "accel", "*.deb"))
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", CORDON_VM_DEBUG="1",
               CORDON_VM_DIR=str(vmdir), CORDON_VM_BOOT="cold")

    def argvs(stderr):
        return [line[len("fake-qemu: "):] for line in stderr.splitlines() if line.startswith("fake-qemu: ")]
    r = run(["--json", "--tier", "microvm", "--", "true"], timeout=120, env=dict(env, CORDON_VM_ACCEL="kvm"))
    assert r.code != 0, r  # the fake KVM guest never comes up
    kvm = argvs(r.stderr)
    assert len(kvm) == 1 and "accel=kvm" in kvm[0] and "-cpu host" in kvm[0] and "tsc_early_khz" in kvm[0], kvm
    r = run(["--json", "--tier", "microvm", "--", "true"], timeout=120, env=dict(env, CORDON_VM_ACCEL="probe"))
    assert r.code == 0 and r.record["accel"] == "tcg", r
    assert "did not come up under KVM" in r.stderr, r.stderr
    tried, used = argvs(r.stderr)
    assert "accel=kvm" in tried and "accel=tcg" in used and "-cpu max" in used and "tsc_early_khz=" in used
    with open("/proc/sys/kernel/random/boot_id") as f:
        assert (vmdir / "accel").read_text() == f.read().strip() + " tcg\n"


def test_creates_right_after_deletes(daemon):
    """Each create restores its guest while the guest deleted just before is still ending: cordond's
    SIGCHLD for that QEMU once interrupted the new one's QMP exchange, and every second create failed
    ("restore the snapshot (QMP)")."""
    from cordon import Sandbox
    for i in range(4):
        sb = Sandbox.create(endpoint=daemon.endpoint, tier="microvm")
        assert sb.exec("echo %d" % i).stdout == "%d\n" % i
        sb.kill()
    cordonlib.wait_for(lambda: qemus() == [], timeout=10, what="the QEMUs' exit")


def test_a_warm_pool_of_guests_hands_them_over(shared_dir):
    """cordond's warm pool works for the microvm tier as for containers: guests restored and given
    their identity ahead of time; a create of the same shape is a hand-over (no QEMU started on the
    request's path); each pooled guest has an identity of its own."""
    from cordon import Sandbox
    spec = os.path.join(shared_dir, "vm-pool.json")
    with open(spec, "w") as f:
        json.dump({"tier": "microvm"}, f)
    d = cordonlib.Daemon(shared_dir, "--pool", f"2:{spec}")
    try:
        cordonlib.wait_for(lambda: len(qemus()) == 2, timeout=60, what="the pool's guests")
        t = time.monotonic()
        a = Sandbox.create(endpoint=d.endpoint, tier="microvm", labels={"job": "vm"})
        handover_s = time.monotonic() - t
        b = Sandbox.create(endpoint=d.endpoint, tier="microvm")
        assert "handed_over" in [e["type"] for e in a.events()]
        assert a.info()["vm"]["boot"] == "snapshot" and a.info()["labels"] == {"job": "vm"}
        ids = {sb.exec("cat /etc/machine-id").stdout for sb in (a, b)}
        assert len(ids) == 2 and a.exec("uname -r").stdout.strip() == guest_release()
        a.kill()
        b.kill()
        assert handover_s < 2, handover_s
    finally:
        assert d.stop() == 0
    cordonlib.wait_for(lambda: qemus() == [], timeout=10, what="the QEMUs' exit")


def test_a_guest_that_never_answers_fails_the_create_in_time(shared_dir, tmp_path, monkeypatch):
    """A guest that hangs (here a stand-in QEMU that only sleeps) fails the create with a 500 once
    $CORDON_VM_START_TIMEOUT_S has passed, rather than hold it until the sandbox's lifetime ends;
    nothing of it stays (the leak check)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "qemu-system-x86_64").write_text("#!/bin/sh\nexec sleep 600\n")
    (fake / "qemu-system-x86_64").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    monkeypatch.setenv("CORDON_VM_BOOT", "cold")
    monkeypatch.setenv("CORDON_VM_START_TIMEOUT_S", "3")
    d = cordonlib.Daemon(shared_dir)
    try:
        t0 = time.monotonic()
        status, body = d.http("POST", "/v1/sandboxes", {"tier": "microvm"})
        took = time.monotonic() - t0
        assert status == 500 and "start timeout" in body["error"]["message"], body
        assert 2.5 < took < 30, took
        status, body = d.http("GET", "/v1/sandboxes")
        assert status == 200 and body["sandboxes"] == [], body
    finally:
        assert d.stop() == 0


@pytest.mark.skipif(not hw_virt(), reason="no hardware virtualisation here: KVM cannot run the guest (TCG does)")
def test_kvm_where_the_hardware_has_it():
    r = run(["--json", "--tier", "microvm", "--", "true"], timeout=60, env=dict(os.environ, CORDON_VM_ACCEL="kvm"))
    assert r.code == 0 and r.record["accel"] == "kvm", r


def test_the_host_image_is_there():
    """image host: the host's /usr, read-only over 9p (mounted before the first command), under the
    host image's skeleton as a container has it: /bin is usr/bin (so #!/bin/bash works), /etc has
    passwd, the CA certificates and the alternatives; nothing of the initramfs (init, modules) shows."""
    r = run(["--tier", "microvm", "--", "sh", "-c",
             "python3 -c 'import sys; print(sys.version_info[0] * 7 * 2)'; touch /usr/x 2>/dev/null || echo ro; "
             "readlink /bin; id -un; test -s /etc/ssl/certs/ca-certificates.crt && echo certs; "
             "awk 'BEGIN { print \"awk\" }'; ls -a / | grep -c -e '^init$' -e '^.modules$'; true"],
            timeout=120)
    assert r.code == 0, r
    assert r.stdout.splitlines() == ["42", "ro", "usr/bin", "root", "certs", "awk", "0"], r


def test_binds_are_shared_and_setuid_stays_in_the_guest(shared_dir):
    """--bind for a VM: each source is one entry of a 9p share that QEMU builds in its own mount
    namespace (nothing is mounted on the host), bound at its target by the guest. What the guest's
    root sets (a setuid bit) is kept in xattrs (mapped-xattr): on the host the file is an ordinary
    0600 file, never a setuid-root one."""
    with open(os.path.join(shared_dir, "in.txt"), "w") as f:
        f.write("from the host\n")
    probe = os.path.join(shared_dir, "tool")
    with open(probe, "w") as f:
        f.write("#!/bin/sh\necho tool ran\n")
    os.chmod(probe, 0o755)
    mounts_before = cordonlib.mount_table()
    r = run(["--tier", "microvm", "--bind", f"{shared_dir}:/data", "--bind", f"{probe}:/opt/tool:ro", "--",
             "sh", "-c", "cat /data/in.txt; /opt/tool; echo out > /data/out; chmod 4755 /data/out; "
             "stat -c %a /data/out; echo x > /opt/tool || echo ro"], timeout=120)
    assert r.code == 0, r
    assert r.stdout.splitlines() == ["from the host", "tool ran", "4755", "ro"], r
    st = os.stat(os.path.join(shared_dir, "out"))
    assert not st.st_mode & 0o7000 and st.st_mode & 0o777 == 0o600, oct(st.st_mode)
    with open(probe) as f:
        assert f.read() == "#!/bin/sh\necho tool ran\n"
    assert cordonlib.mount_table() == mounts_before
    r = run(["--tier", "microvm", "--bind", "/no/such/dir:/data", "--", "true"], timeout=60)
    assert r.code == 125 and "mounts[0].source" in r.stderr, r


@pytest.mark.parametrize("kind", ["microvm", "vm"])  # not `tier`: conftest's filter of that fixture
def test_qemu_runs_jailed(daemon, kind):
    """QEMU is confined as Firecracker's jailer confines its VMM: its root is a tmpfs holding only what
    it opens (the host's /etc, /home, /root are not there), it is alone in its pid namespace, and its
    own seccomp filter is on. Every guest's QEMU runs as a uid of its own with no capability: a restored
    microvm's sees the template's directory (whose RAM file QEMU 7.2 opens read-write) through an
    idmapped mount that shows root's files as its uid's. Seen failing before the jail (QEMU saw the
    host's root and held every capability: CapEff 000001fffeffffff), and while a restored QEMU stayed
    uid 0 with CAP_DAC_OVERRIDE."""
    from cordon import Sandbox
    sb = Sandbox.create(endpoint=daemon.endpoint, tier=kind)
    try:
        assert sb.exec("echo up").stdout == "up\n"
        (q,) = qemus()
        with open(f"/proc/{q.pid}/status") as f:
            status = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
        uid = int(status["Uid"].split()[0])
        assert 0x3f000000 <= uid < 0x40000000 and int(status["CapEff"], 16) == 0, status
        assert status["Groups"].split() in ([], [str(os.stat("/dev/kvm").st_gid)]), status
        if kind == "microvm":  # restored: its template, idmapped to its uid, and nothing else of root's
            mnt = open(f"/proc/{q.pid}/mountinfo").read()
            assert "idmapped" in mnt, mnt
        assert int(status["CapBnd"], 16) == 1 << 1, status
        assert status["NSpid"].split()[-1] == "1", status["NSpid"]
        assert status["Seccomp"].strip() == "2"
        root = f"/proc/{q.pid}/root"
        for gone in ("etc/passwd", "etc/shadow", "home", "root", "boot", "var/log", "run"):
            assert not os.path.lexists(os.path.join(root, gone)), gone
        assert os.listdir(os.path.join(root, "etc")) == ["ld.so.cache"]
        assert os.path.exists(os.path.join(root, "usr/bin/qemu-system-x86_64"))
        assert [p for p in os.listdir(os.path.join(root, "proc")) if p.isdigit()] == ["1"]  # only itself
    finally:
        sb.kill()
    cordonlib.wait_for(lambda: qemus() == [], timeout=10, what="the QEMU's exit")
