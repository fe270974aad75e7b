"""The container tier's writable layer on disk (issue 20 point 6, docs/disk.md): a filesystem of
limits.disk_mb of its own per sandbox, so that a full layer is ENOSPC and a `disk` violation, never an
OOM kill, whatever memory_mb is; it is the default, and cordond makes layers ahead so that a create
pays nothing for it. Spec "disk": "memory" keeps the tmpfs charged to memory, by choice. Nothing of
a layer (mount, loop device, file) outlives its sandbox — the leak check (cordonlib.writable_loops)
looks for the loop devices.

Through cordond the layer is by default a subvolume of its layer pool instead (writable_pool = auto,
test_writable_pool.py). The tests of the ext4 layers run on a cordond with writable_pool = off; those
that hold for both kinds run on each."""

import os
import signal
import socket
import struct

import pytest

import cordonlib
from cordon import InvalidArgument, Sandbox
from cordonlib import FILL, Running, run


def counts(sb):
    return sb.violations()["counts"]


@pytest.fixture
def ext4d(shared_dir):
    """A cordond of this test's own whose container layers are ext4 images of their own (writable_pool =
    off: what `cordon run`, checkpointable sandboxes and a host without the pool have)."""
    d = cordonlib.Daemon(shared_dir, "--writable-pool", "off")
    yield d
    assert d.stop() == 0, d.output()


FULL = {"ext4": "ENOSPC", "pool": "EDQUOT"}  # what a full layer is, by its kind


@pytest.fixture(params=["ext4", "pool"])
def layered(request, shared_dir):
    """A cordond of this test's own with either kind of layer: ext4 images (writable_pool = off) or
    subvolumes of its pool (btrfs); d.kind says which."""
    d = cordonlib.Daemon(shared_dir, "--writable-pool", "off" if request.param == "ext4" else "btrfs")
    d.kind = request.param
    yield d
    assert d.stop() == 0, d.output()


def test_writing_past_disk_mb_is_enospc_and_a_disk_violation(ext4d):
    """A layer smaller than memory fills up: ENOSPC (the errno itself), one `disk` violation, no OOM.
    (The pool's cap: test_writable_pool.py.)"""
    with Sandbox.create(endpoint=ext4d.endpoint, memory_mb=256, disk_mb=64, disk="disk") as sb:
        r = sb.exec(["python3", "-c", FILL, "/workspace/big"], timeout_s=120)
        assert r.exit_code == 0, r
        name, mb = r.stdout.split()
        assert name == "ENOSPC", r.stdout
        assert 62 <= int(mb) <= 64, r.stdout  # disk_mb, less ext4's last MiB
        c = counts(sb)
        assert (c["disk"], c["oom"]) == (1, 0), c
        ev = [e for e in sb.events() if e["type"] == "violation"]
        assert [e["kind"] for e in ev] == ["disk"] and ev[0]["disk_mb"] == 64, ev
        # Usable again once the file is gone, and still full at 64 MB, not more.
        r = sb.exec(["sh", "-c", "rm /workspace/big && dd if=/dev/zero of=/tmp/again bs=1M count=32 2>&1 && echo ok"],
                    timeout_s=60)
        assert r.exit_code == 0 and r.stdout.strip().endswith("ok"), r
        assert counts(sb)["disk"] == 1
        r = sb.exec(["python3", "-c", FILL, "/tmp/more"], timeout_s=120)
        assert r.stdout.split()[0] == "ENOSPC" and 30 <= int(r.stdout.split()[1]) <= 32, r.stdout
        assert counts(sb)["disk"] == 2, counts(sb)


def test_a_file_larger_than_memory_fits_in_the_disk(layered):
    """memory_mb=256, disk_mb=1024 (the issue's case): a 300 MB file is written, synced and read
    back; no OOM, no violation, and the sandbox goes on. Seen failing before the fix (main's tmpfs
    layer, cd05691+6e7d9d2): dd "Killed", rc=137, 266260480 bytes written."""
    with Sandbox.create(endpoint=layered.endpoint, memory_mb=256, disk_mb=1024, disk="disk") as sb:
        r = sb.exec(["sh", "-c", "dd if=/dev/zero of=/workspace/big bs=1M count=300 conv=fsync 2>&1; echo rc=$?; "
                     "wc -c < /workspace/big"], timeout_s=300)
        assert r.exit_code == 0, r
        assert r.stdout.split()[-2:] == ["rc=0", str(300 << 20)], r.stdout
        assert counts(sb)["oom"] == 0 and counts(sb)["disk"] == 0, counts(sb)
        if layered.kind == "ext4":  # btrfs's statfs knows nothing of the quota: df shows the pool
            r = sb.exec(["sh", "-c", "df -k / | tail -1"])
            total_kb = int(r.stdout.split()[1])
            assert 1016 * 1024 <= total_kb <= 1024 * 1024, r.stdout  # the sandbox sees disk_mb
        assert sb.exec(["true"]).exit_code == 0


def test_memory_kind_keeps_the_tmpfs_charged_to_memory(daemon):
    """disk: "memory" is the old layer, by choice: the same 300 MB file is an OOM kill."""
    with Sandbox.create(endpoint=daemon.endpoint, memory_mb=256, disk_mb=1024, disk="memory") as sb:
        assert sb.info()["spec"]["disk"] == "memory"
        r = sb.exec(["sh", "-c", "dd if=/dev/zero of=/workspace/big bs=1M count=300 2>&1"], timeout_s=120)
        assert r.exit_code == 137, r
        assert counts(sb)["oom"] >= 1, counts(sb)
    with Sandbox.create(endpoint=daemon.endpoint, disk_mb=16, disk="memory") as sb:
        r = sb.exec(["python3", "-c", FILL, "/tmp/big"], timeout_s=60)
        assert r.stdout.split()[0] == "ENOSPC", r.stdout


def test_the_limit_cannot_be_lifted_from_inside(layered):
    """The sandbox's root owns the files of its layer, not the filesystem: it cannot resize it,
    remount it, set a project id or reach the block device (a subvolume of its own: test_writable_pool.py)."""
    probe = r"""
import errno, fcntl, os, struct
def attempt(name, f):
    try:
        f(); print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
fd = os.open("/workspace", os.O_RDONLY)
FS_IOC_FSGETXATTR, FS_IOC_FSSETXATTR = 0x801C581F, 0x401C5820
def setproj():
    x = bytearray(fcntl.ioctl(fd, FS_IOC_FSGETXATTR, bytes(28)))
    struct.pack_into("=II", x, 0, struct.unpack_from("=I", x, 0)[0] | 0x200, 0)  # PROJINHERIT
    struct.pack_into("=I", x, 12, 4242)
    fcntl.ioctl(fd, FS_IOC_FSSETXATTR, bytes(x))
attempt("projid", setproj)
open("/workspace/f", "w").close()
ffd = os.open("/workspace/f", os.O_RDWR)
attempt("resize", lambda: fcntl.ioctl(ffd, 0x40086610, struct.pack("=Q", 1 << 22)))  # EXT4_IOC_RESIZE_FS
attempt("loopdev", lambda: os.open("/dev/loop0", os.O_RDWR))
attempt("mknod", lambda: os.mknod("/tmp/blk", 0o600 | 0o060000, os.makedev(7, 0)))
"""
    with Sandbox.create(endpoint=layered.endpoint, disk_mb=32, disk="disk") as sb:
        before = sb.exec(["sh", "-c", "df -k / | tail -1"]).stdout.split()[1]
        r = sb.exec(["python3", "-c", probe], timeout_s=60)
        got = dict(line.split() for line in r.stdout.splitlines())
        assert set(got) == {"projid", "resize", "loopdev", "mknod"}, r
        assert all(v != "ok" for v in got.values()), got
        r = sb.exec(["sh", "-c", "mount -o remount,size=1G / 2>/dev/null; echo $?; mount -t tmpfs none /tmp 2>/dev/null; echo $?"])
        assert r.stdout.split() != [] and "0" not in r.stdout.split(), r
        assert sb.exec(["sh", "-c", "df -k / | tail -1"]).stdout.split()[1] == before
        r = sb.exec(["python3", "-c", FILL, "/tmp/big"], timeout_s=60)
        assert r.stdout.split()[0] == FULL[layered.kind] and int(r.stdout.split()[1]) <= 32, r.stdout


def root_mount(sb):
    return next(ln.split()[3] for ln in sb.exec(["cat", "/proc/mounts"]).stdout.splitlines() if ln.split()[1] == "/")


def test_a_layer_mounted_once_is_a_volatile_overlay(layered, shared_dir):
    """The overlay of a layer that ends with its sandbox passes no sync down (volatile): its unmount at the
    end wrote the layer's dirty pages out just before it was thrown away, and in the pool committed the
    whole btrfs (docs/performance.md); in the sandbox fsync returns at once. A checkpointable layer is
    mounted again (restore, fork), which overlay refuses after a volatile mount: not volatile. Without the
    option (rootfs.c) the first assertion fails; without its check for checkpoints, every restore of
    test_checkpoints.py fails ("mount overlay ...: Invalid argument")."""
    with Sandbox.create(endpoint=layered.endpoint, disk_mb=32) as sb:
        opts = root_mount(sb).split(",")
        assert "volatile" in opts or "fsync=volatile" in opts, opts
        r = sb.exec(["python3", "-c", "import os; f = os.open('/tmp/f', os.O_WRONLY | os.O_CREAT); "
                     "os.write(f, b'x' * 4096); os.fsync(f); os.sync(); print('ok')"])
        assert r.stdout == "ok\n", r
    d = cordonlib.Daemon(shared_dir, "--state-dir", os.path.join(shared_dir, "state"))
    try:
        with Sandbox.create(endpoint=d.endpoint, disk_mb=32, checkpoints=True) as sb:
            opts = root_mount(sb).split(",")
            assert "volatile" not in opts and "fsync=volatile" not in opts, opts
    finally:
        assert d.stop() == 0, d.output()


def test_a_bad_disk_kind_is_refused_naming_the_field(daemon):
    with pytest.raises(InvalidArgument) as e:
        Sandbox.create(endpoint=daemon.endpoint, disk="floppy")
    assert e.value.field == "disk" and "floppy" in e.value.message, e.value
    r = run(["--disk-kind", "tape", "--", "true"])
    assert r.code == cordonlib.EXIT_CORDON and "--disk-kind 'tape'" in r.stderr, r


def test_cordon_run_uses_the_disk_and_memory_kinds():
    """Seen failing before the fix (main's cordon run): stdout 'rc=137' for the 300 MB file."""
    r = run(["--memory", "256M", "--disk", "1G", "--disk-kind", "disk", "--", "sh", "-c",
             "dd if=/dev/zero of=/tmp/big bs=1M count=300 2>/dev/null; echo rc=$?"], timeout=300)
    assert (r.code, r.stdout) == (0, "rc=0\n"), r
    r = run(["--disk-kind", "memory", "--disk", "8M", "--", "sh", "-c",
             "dd if=/dev/zero of=/tmp/big bs=1M count=16 2>&1; echo rc=$?"], timeout=60)
    assert "No space left on device" in r.stdout and r.stdout.strip().endswith("rc=1"), r


def slot_loops():
    return {n for n, v in cordonlib.writable_loops().items() if isinstance(v, int)}


def stock_loops(pid):
    return {n for n, v in cordonlib.writable_loops().items() if v == ("stock", pid)}


def test_the_layer_goes_with_its_sandbox(ext4d):
    """One loop device per running sandbox, named after its slot (a size cordond has no layers of
    made ahead: the create makes its own); gone once the sandbox is."""
    before = slot_loops()
    layers = cordonlib.writable_layers()
    with Sandbox.create(endpoint=ext4d.endpoint, disk_mb=32, disk="disk") as sb:
        mine = slot_loops() - before
        assert len(mine) == 1, mine
        mine = {t for t in cordonlib.writable_layers() - layers if t[0] in mine}
        assert len(mine) == 1, mine
        assert sb.exec(["true"]).exit_code == 0
    # cordond's delete is asynchronous: under load (the sanitizer pass beside guests) it took over 5 s.
    # By the triple: a stock layer cordond made meanwhile got this very device once (CI, stop 31).
    cordonlib.wait_for(lambda: not (cordonlib.writable_layers() & mine), timeout=20,
                       what="the sandbox's loop device to clear")


def test_cordond_makes_layers_ahead_and_uses_each_once(ext4d):
    """The default spec's layer is on disk, and cordond keeps writable_stock (4) of them ready: a create
    takes one, the stock fills again, and a used layer goes with its sandbox — never to the next one.
    Catches: a layer handed out twice (the second sandbox would see the first one's file), a used one
    that outlives its sandbox or a stock that outlives its cordond (the loop counts would not fall)."""
    pid = ext4d.proc.pid
    cordonlib.wait_for(lambda: len(stock_loops(pid)) == 4, timeout=30, what="4 layers made ahead")
    with Sandbox.create(endpoint=ext4d.endpoint) as a:
        assert a.info()["spec"]["disk"] == "disk"
        r = a.exec(["sh", "-c", "echo mine > /tmp/marker && df -k / | tail -1"])
        assert r.exit_code == 0, r
        assert 900 * 1024 < int(r.stdout.split()[1]) <= 1024 * 1024, r.stdout  # 1 GiB, disk_mb's default
        # its layer is one made ahead (named after cordond), and one more is made in its place
        cordonlib.wait_for(lambda: len(stock_loops(pid)) == 5, timeout=30, what="the stock filled again")
        with Sandbox.create(endpoint=ext4d.endpoint) as b:
            r = b.exec(["sh", "-c", "ls /tmp; df -k / | tail -1"])
            assert "marker" not in r.stdout, r.stdout
            cordonlib.wait_for(lambda: len(stock_loops(pid)) == 6, timeout=30, what="the stock filled again")
    cordonlib.wait_for(lambda: len(stock_loops(pid)) == 4, timeout=10, what="the used layers to go")
    assert ext4d.stop() == 0
    cordonlib.wait_for(lambda: not stock_loops(pid), timeout=10, what="the stock to go with its cordond")


def loop_mb(name):
    """A loop device's size in MiB (a layer's file is disk_mb and its inode tables: a little more)."""
    with open(f"/sys/block/{name}/size") as f:
        return int(f.read()) * 512 >> 20


def test_other_sizes_never_take_the_default_sizes_stock(ext4d):
    """The stock keeps four sizes: the default spec's always, and the last three others asked for.
    Creates of four other sizes evict each other, never the default's. Caught (with the least recently
    asked-for size evicted, whichever it was): after them no 1 GiB layer was left in the stock, so every
    default create paid its loop device and mount again."""
    pid = ext4d.proc.pid
    ext4d.wait_stock_full()
    for mb in (40, 48, 56, 72):
        with Sandbox.create(endpoint=ext4d.endpoint, disk_mb=mb) as sb:
            assert sb.exec(["true"]).exit_code == 0
    # the refills of the other sizes run too; the default's four stay
    cordonlib.wait_for(lambda: sum(loop_mb(n) >= 1024 for n in stock_loops(pid)) == 4, timeout=30,
                       what="the default size's four layers in the stock")
    assert sum(loop_mb(n) >= 1024 for n in stock_loops(pid)) == 4


def take_layer(daemon_socket):
    """A layer of cordond's stock, as `cordon run` takes one: its mount fd, or None."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as c:
        c.connect(daemon_socket + ".layers")
        c.send(b"cdnlyr1\0" + struct.pack("=Q", 1024))
        msg, fds, _, _ = socket.recv_fds(c, 1, 1)
        return fds[0] if msg == b"L" and fds else None


def fake_stock(path, fd, uid):
    """A stranger's "<socket>.layers" at path: listens as uid and hands fd over to whoever asks (in a
    child of the test, ended by the caller). Returns its pid."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            srv.bind(path)
            os.chmod(path, 0o777)
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            srv.listen(8)  # the peer's credentials are those of listen()
            os.write(ready_w, b"r")
            while True:
                c, _ = srv.accept()
                c.recv(16)
                socket.send_fds(c, [b"L"], [fd])
                c.close()
        finally:
            os._exit(0)
    os.close(ready_w)
    assert os.read(ready_r, 1) == b"r"
    os.close(ready_r)
    return pid


def test_cordon_run_takes_a_layer_from_cordonds_stock(ext4d):
    """`cordon run` on a host where cordond runs takes one of its layers made ahead (over
    "<socket>.layers"), so its create pays no loop device and no mount either; the stock fills again
    and the layer goes with the run's sandbox."""
    pid = ext4d.proc.pid
    ext4d.wait_stock_full()
    env = {**os.environ, "CORDON_SOCKET": ext4d.socket}
    before = slot_loops()
    with Running(["--", "sh", "-c", "echo up; df -k / | tail -1; sleep 60"], env=env) as r:
        assert r.proc.stdout.readline() == "up\n"
        assert 900 * 1024 < int(r.proc.stdout.readline().split()[1]) <= 1024 * 1024  # disk_mb's default
        assert slot_loops() == before  # not a layer of its own
        cordonlib.wait_for(lambda: len(stock_loops(pid)) == 5, timeout=30, what="the stock filled again")
    cordonlib.wait_for(lambda: len(stock_loops(pid)) == 4, timeout=20, what="the used layer to go")


def test_cordon_run_takes_layers_only_from_root(ext4d, shared_dir):
    """A layer is the sandbox's writable root: `cordon run` takes one only from a socket root listens
    on, and only if it is the root of an ext4 of its own. What this catches: without the owner check,
    the run below uses the layer a stranger (uid 65534) hands over — a genuine one here, taken from
    cordond, so that only the owner check can refuse it — and that layer's root becomes the sandbox's,
    with upper/ in it (checked by breaking the check); without the filesystem check, a root-owned socket handing over a plain
    directory gets it chowned to the sandbox and the run fails."""
    ext4d.wait_stock_full()
    layer = take_layer(ext4d.socket)
    assert layer is not None
    plain = os.path.join(shared_dir, "not-a-layer")
    os.mkdir(plain)
    plain_fd = os.open(plain, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for uid, fd in ((65534, layer), (0, plain_fd)):
            sock = os.path.join(shared_dir, f"stranger-{uid}.sock")
            server = fake_stock(sock + ".layers", fd, uid)
            try:
                with Running(["--", "sh", "-c", "echo up; sleep 60"], env={**os.environ, "CORDON_SOCKET": sock}) as r:
                    assert r.proc.stdout.readline() == "up\n", r.proc.stderr.read()
                    # a layer a sandbox took is its root's and holds its upper/ and work/ (loop names
                    # do not tell: a loop device freed by another test's sandbox is taken again)
                    st = os.fstat(layer)
                    assert (st.st_uid, "upper" in os.listdir(f"/proc/self/fd/{layer}")) == (0, False), "the stranger's layer was used"
            finally:
                os.kill(server, signal.SIGKILL)
                os.waitpid(server, 0)
        st = os.stat(plain)
        assert (st.st_uid, os.listdir(plain)) == (0, []), "the directory was used as a layer"
    finally:
        os.close(layer)
        os.close(plain_fd)


def test_without_a_stock_a_create_makes_its_layer(shared_dir):
    """writable_stock = 0: nothing made ahead, the layer is the sandbox's own (named after its slot)."""
    d = cordonlib.Daemon(shared_dir, "--writable-stock", "0", "--writable-pool", "off")
    try:
        before = slot_loops()
        with Sandbox.create(endpoint=d.endpoint) as sb:
            assert len(slot_loops() - before) == 1
            assert sb.exec(["true"]).exit_code == 0
        assert not stock_loops(d.proc.pid)
    finally:
        assert d.stop() == 0


def test_a_killed_cordon_run_leaves_no_layer():
    """SIGKILL the one-shot `cordon run` mid-write: its reaper ends the sandbox, the mount namespace
    goes and the layer with it (the autouse leak check looks for its loop device too). The layer's
    file never had a name: nothing is left in <state>/writable either."""
    before = cordonlib.writable_layers()
    with Running(["--disk", "64M", "--disk-kind", "disk", "--", "sh", "-c", "dd if=/dev/zero of=/tmp/x bs=1M count=40; sleep 60"]) as p:
        # Its own layer, not whatever is new: CI (stop 32) counted the other pass's stock refill in,
        # which stays until that cordond stops.
        mine = cordonlib.wait_for(lambda: cordonlib.layers_of(p.proc.pid) - before, timeout=10,
                                  what="a writable layer")
        assert len(mine) == 1, mine
        p.signal(signal.SIGKILL)
        p.proc.wait(timeout=10)
    cordonlib.wait_for(lambda: not (cordonlib.writable_layers() & mine), timeout=10, what="the layer to go")
    d = os.path.join(os.environ.get("CORDON_STATE_DIR", "/var/lib/cordon"), "writable")
    assert not os.path.isdir(d) or os.listdir(d) == [], os.listdir(d)


def test_a_layer_larger_than_the_hosts_free_space_is_refused():
    """The layer's image is sparse: one the host's disk could not hold would end in I/O errors (and a
    full host disk), so it is refused up front, naming the field."""
    state = os.environ.get("CORDON_STATE_DIR", "/var/lib/cordon")
    st = os.statvfs(state if os.path.isdir(state) else "/")
    free_gb = st.f_bavail * st.f_frsize >> 30
    if free_gb >= 1000:
        pytest.skip(f"the host has {free_gb} GiB free: no disk_mb within limits exceeds it")
    r = run(["--disk", "1000G", "--disk-kind", "disk", "--", "true"])
    assert r.code == cordonlib.EXIT_CORDON, r
    assert "limits.disk_mb" in r.stderr and "free" in r.stderr, r.stderr
    tpl = os.path.join(state, "cache", "writable")
    assert not any(n.startswith("ext4-1024000m") for n in (os.listdir(tpl) if os.path.isdir(tpl) else [])), \
        "a template was made for a layer that was refused"
