"""cordond's writable layer pool (writable_pool = btrfs, docs/disk.md, issue 25): each container layer is a
subvolume of one btrfs, capped by a simple quota, instead of an ext4 of its own on a loop device, so that
a create makes no superblock, loop device or kernel thread. The cap holds (EDQUOT, a `disk` violation,
usage from the quota), the sandbox cannot step outside it with a subvolume of its own, and a layer goes
with its sandbox, or with the next start's sweep when cordond died first."""

import os
import subprocess
import tempfile

import pytest

import cordonlib
from cordon import Sandbox
from cordonlib import FILL, Daemon, PoolView, owner_of

# The btrfs ioctls that make a subvolume or a snapshot (linux/btrfs.h: _IOW(0x94, nr, 4096 bytes)),
# tried on a directory the sandbox may write that is its layer's own, not the overlay's.
SUBVOL = """
import errno, fcntl, os, sys
for name, nr in (("SUBVOL_CREATE", 14), ("SUBVOL_CREATE_V2", 24), ("SNAP_CREATE", 1), ("SNAP_CREATE_V2", 23)):
    fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
    args = bytearray(4096)
    off = 8 if nr in (14, 1) else 56  # the name, in btrfs_ioctl_vol_args and _v2
    args[off:off + 3] = b"esc"
    try:
        fcntl.ioctl(fd, 0x50009400 | nr, args, True)  # mutable: passed as is (a copy is at most 1 KiB)
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode[e.errno])
"""


def pool_daemon(work, keep=False):
    """A cordond with the pool, and a state directory of its own (so a pool of its own)."""
    os.chmod(work, 0o755)  # the sandboxes' users look up the image beneath it
    d = Daemon(work, "--state-dir", os.path.join(work, "state"), "--writable-pool", "btrfs", keep=keep)
    d.state = os.path.join(work, "state")
    return d


@pytest.fixture
def pool():  # its own each: a cordond keeps the cgroups of its ended sandboxes' slots while it runs
    with tempfile.TemporaryDirectory(prefix="cordon-pool-") as work:
        d = pool_daemon(work)
        try:
            yield d
        finally:
            assert d.stop() == 0, d.output()


def test_a_pool_layer_is_capped_by_its_quota(pool):
    """disk_mb=64 under memory_mb=64: the fill stops at the cap with EDQUOT, one `disk` violation, no OOM
    kill; usage tells the layer's bytes and its cap, not the pool's."""
    with Sandbox.create(endpoint=pool.endpoint, memory_mb=64, disk_mb=64) as sb:
        r = sb.exec(["sh", "-c", "stat -f -c %T /"])
        assert r.stdout.split() == ["overlayfs"], r
        r = sb.exec(["python3", "-c", FILL, "/workspace/big"], timeout_s=120)
        name, mb = r.stdout.split()
        assert name == "EDQUOT" and 60 <= int(mb) <= 64, r.stdout
        c = sb.violations()["counts"]
        assert (c["disk"], c["oom"]) == (1, 0), c
        u = sb.usage()
        assert u["disk_size_bytes"] == 64 << 20, u
        assert 60 << 20 <= u["disk_used_bytes"] <= 64 << 20, u
        r = sb.exec(["sh", "-c", "rm /workspace/big && dd if=/dev/zero of=/tmp/again bs=1M count=32 2>&1 && echo ok"],
                    timeout_s=60)
        assert r.stdout.strip().endswith("ok"), r
        r = sb.exec(["python3", "-c", FILL, "/tmp/more"], timeout_s=120)
        assert r.stdout.split()[0] == "EDQUOT" and 28 <= int(r.stdout.split()[1]) <= 32, r.stdout


def test_usage_counts_writes_at_once(pool):
    """A write is in the usage as soon as it is made, not at btrfs's next commit (~30 s later). The quota
    tree on disk, and the group's charged bytes, read 0 for 35 s after a 40 MB write in a probe: usage
    adds what is reserved for writes not on disk yet."""
    with Sandbox.create(endpoint=pool.endpoint, disk_mb=256) as sb:
        assert sb.exec(["sh", "-c", "dd if=/dev/zero of=/workspace/f bs=1M count=40 status=none"]).exit_code == 0
        u = sb.usage()
        assert 40 << 20 <= u["disk_used_bytes"] <= 48 << 20 and u["disk_size_bytes"] == 256 << 20, u
        assert sb.violations()["counts"]["disk"] == 0


def test_a_sandbox_cannot_make_a_subvolume_of_its_own(pool):
    """A subvolume is outside its parent's quota, and anyone who may write a directory of a btrfs may make
    one. Under a read-only root, /tmp is a directory of the layer bound there (no overlay between: btrfs
    answers its ioctls). seccomp refuses the four ioctls (EPERM) wherever they are aimed. Seen failing
    without the four rules (seccomp-compile.c): SUBVOL_CREATE on /tmp printed "ok", and three 60 MB files
    (180 MB) fitted in that new subvolume of a 64 MB layer."""
    with Sandbox.create(endpoint=pool.endpoint, disk_mb=64, read_only=True) as sb:
        assert sb.exec(["stat", "-f", "-c", "%T", "/tmp"]).stdout.split() == ["btrfs"]
        for where in ("/tmp", "/workspace"):
            r = sb.exec(["python3", "-c", SUBVOL, where])
            got = dict(line.split() for line in r.stdout.splitlines())
            assert len(got) == 4 and set(got.values()) == {"EPERM"}, (where, r)
        assert sb.exec(["sh", "-c", "ls -A /tmp"]).stdout == ""


def test_layers_go_with_their_sandboxes_and_strays_with_the_next_start():
    """Each sandbox has one subvolume, named by its id, destroyed when it is deleted. A layer whose
    sandbox is gone (cordond died before its end) is swept at the next start, and only this cordond's:
    another's part of the pool is left alone; the layer of a sandbox adopted across the restart stays."""
    with tempfile.TemporaryDirectory(prefix="cordon-pool-") as work:
        first = pool_daemon(work, keep=True)
        owner = owner_of(first)
        a = Sandbox.create(endpoint=first.endpoint, disk_mb=32)
        b = Sandbox.create(endpoint=first.endpoint, disk_mb=32)
        again = None
        try:
            with PoolView(first) as v:
                assert v.layers(owner) == sorted([a.id, b.id])
                a.kill()
                cordonlib.wait_for(lambda: v.layers(owner) == [b.id], timeout=10, what="a's layer destroyed")
                for who in (owner, "sandboxes-other"):
                    os.makedirs(os.path.join(v.dir, who), exist_ok=True)
                    subprocess.run(["btrfs", "-q", "subvolume", "create", os.path.join(v.dir, who, "sb-stray")],
                                   check=True)
                assert v.layers(owner) == sorted([b.id, "sb-stray"])
            assert first.stop() == 0, first.output()
            again = pool_daemon(work, keep=True)
            with PoolView(again) as v:
                assert v.layers(owner) == [b.id], "the stray is swept, the adopted sandbox's layer kept"
                assert v.layers("sandboxes-other") == ["sb-stray"]
                b.kill()
                cordonlib.wait_for(lambda: v.layers(owner) == [], timeout=10, what="b's layer destroyed")
                subprocess.run(["btrfs", "-q", "subvolume", "delete", os.path.join(v.dir, "sandboxes-other", "sb-stray")],
                               check=True, capture_output=True)
        finally:
            for sb in (a, b):
                try:
                    sb.kill()
                except Exception:
                    pass
            if again:
                again.stop()
            elif first.proc.poll() is None:
                first.stop()


def test_auto_takes_the_pool_where_there_is_one_and_else_ext4_layers():
    """writable_pool = auto: the pool on this host (btrfs with simple quotas, btrfs-progs). Where no pool can
    be made (here a mkfs.btrfs that fails) ext4 layers, said at start, and nothing of a pool left behind.
    A pool file already there that cannot be opened stops the start, in auto as with btrfs: sandboxes about
    to be adopted may live on it, and ext4's checks would count none of their disk violations (without
    that rule auto started on it with ext4 layers; seen). Health tells which kind a create gets."""
    with tempfile.TemporaryDirectory(prefix="cordon-pool-") as work:
        os.chmod(work, 0o755)
        d = Daemon(work, "--state-dir", os.path.join(work, "state"), "--writable-pool", "auto")
        d.state = os.path.join(work, "state")
        try:
            assert d.endpoint.json("GET", "/v1/health")["writable_layers"] == "pool"
            with Sandbox.create(endpoint=d.endpoint, disk_mb=32) as sb:
                assert sb.exec(["true"]).exit_code == 0
                with PoolView(d) as v:
                    assert v.layers(owner_of(d)) == [sb.id]
        finally:
            assert d.stop() == 0, d.output()
    with tempfile.TemporaryDirectory(prefix="cordon-pool-") as work:
        os.chmod(work, 0o755)
        state = os.path.join(work, "state")
        fake = os.path.join(work, "bin")
        os.makedirs(fake)
        with open(os.path.join(fake, "mkfs.btrfs"), "w") as f:
            f.write("#!/bin/sh\necho 'no btrfs here' >&2\nexit 1\n")
        os.chmod(os.path.join(fake, "mkfs.btrfs"), 0o755)
        d = Daemon(work, "--state-dir", state, "--writable-pool", "auto",
                   env={"PATH": fake + ":" + os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")})
        try:
            assert d.endpoint.json("GET", "/v1/health")["writable_layers"] == "ext4"
            with Sandbox.create(endpoint=d.endpoint, disk_mb=32) as sb:
                r = sb.exec(["python3", "-c", FILL, "/tmp/big"], timeout_s=60)
                assert r.stdout.split()[0] == "ENOSPC", r.stdout
        finally:
            assert d.stop() == 0, d.output()
        assert "writable_pool auto: no layer pool (mkfs.btrfs of " in d.output(), d.output()
        assert not [n for n in os.listdir(state) if n.startswith("pool.btrfs")], os.listdir(state)
        os.makedirs(os.path.join(state, "pool.btrfs"))
        for kind in ("auto", "btrfs"):
            with pytest.raises(AssertionError) as e:
                Daemon(work, "--state-dir", state, "--writable-pool", kind)
            assert f"writable_pool {kind}: open " in str(e.value) and "pool.btrfs: Is a directory" in str(e.value), e.value


def test_a_bad_pool_kind_is_refused_naming_the_option():
    with tempfile.TemporaryDirectory(prefix="cordon-pool-") as work:
        with pytest.raises(AssertionError) as e:
            Daemon(work, "--writable-pool", "zfs")
        assert "writable-pool" in str(e.value) and "auto, btrfs or off" in str(e.value), e.value


