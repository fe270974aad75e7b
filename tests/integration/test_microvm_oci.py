"""OCI images on the microvm tier (issue 20 point 4): the image's layers merged (whiteouts and
opaque directories applied) into one erofs disk, owners as the image says, made once per manifest
digest under <vm dir>/images/ and removed by `cordon image rm|prune` when no reference names it.
The guest's root is that disk under an overlay, read-only but for the image's own data
directories, as for an image directory (test_microvm.py)."""

import contextlib
import json
import os
import stat
import struct
import subprocess
import threading

import pytest

import cordonlib
from cordon import Sandbox, images
from cordonlib import run
from registry import Layer
from test_images import CONFIG, busybox_layer, cordon, task_layers

pytestmark = pytest.mark.needs_vm

# security.capability, VFS_CAP_REVISION_2 with the effective bit: cap_net_raw (13) permitted.
CAP_NET_RAW = struct.pack("<IIIII", 0x02000001, 1 << 13, 0, 0, 0)
BUILDING = "building the image's root disk"


def oci_image_layers(version):
    """task_layers (a whiteout, an opaque directory, a hard link, a symlink, a uid-1000 home, a
    setuid file, a user.* xattr) and a third layer that deletes a base file and adds a file with
    a capability."""
    base, top = task_layers()
    base.file("etc/later-gone", "x\n")
    third = (Layer().whiteout("etc/later-gone").file("version", version)
             .file("bin/capped", "#!/bin/sh\n", mode=0o755,
                   pax={"SCHILY.xattr.security.capability": CAP_NET_RAW.decode("ascii")}))
    return [base, top, third]


def disk_of(ref):
    rows = json.loads(cordon("image", "ls", "--json").stdout)
    manifest = next(row["manifest"] for row in rows if row["reference"] == ref)
    algo, hexd = manifest.split(":")
    return os.path.join(cordonlib.VM_DIR, "images", f"oci-{algo}-{hexd}.erofs")


@contextlib.contextmanager
def mounted(disk, where):
    """The disk as the guest's kernel sees it, on the host (read-only, a loop device that goes
    with the unmount)."""
    os.makedirs(where, exist_ok=True)
    r = subprocess.run(["mount", "-t", "erofs", "-o", "ro,loop", disk, where], capture_output=True, text=True)
    cordonlib.need(r.returncode == 0, f"cannot loop-mount an erofs here: {r.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", where], check=True)


def check_disk_tree(root):
    """The merged tree, checked on the disk itself (the guest's busybox has no getfattr)."""
    p = lambda *a: os.path.join(root, *a)  # noqa: E731
    assert not os.path.lexists(p("etc/gone")) and not os.path.lexists(p("etc/later-gone"))
    assert os.path.exists(p("etc/passwd"))
    assert os.listdir(p("opt/data")) == ["new"]  # the opaque directory hid the base's "old"
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            st = os.lstat(os.path.join(d, n))
            assert not stat.S_ISCHR(st.st_mode), f"a whiteout left in the disk: {d}/{n}"
            assert not n.startswith(".wh."), f"{d}/{n}"
    assert os.listxattr(p("opt/data"), follow_symlinks=False) in ([], ["user.overlay.opaque"])
    notes, readme, link = (os.lstat(p(x)) for x in ("home/dev/notes", "testbed/README", "testbed/README.link"))
    assert (notes.st_uid, notes.st_gid) == (1000, 1000)
    assert (readme.st_uid, readme.st_gid) == (0, 0)
    assert (readme.st_ino, readme.st_nlink) == (link.st_ino, 2)  # one inode, two names
    assert os.readlink(p("testbed/readme")) == "README"
    assert stat.S_IMODE(os.lstat(p("bin/suid")).st_mode) == 0o4755
    assert os.getxattr(p("testbed/tagged"), "user.origin") == b"layer2"
    assert os.getxattr(p("bin/capped"), "security.capability") == CAP_NET_RAW


GUEST_SCRIPT = (
    "echo $FROM_IMAGE; cat /version; ls /etc; ls /opt/data; "
    "stat -c '%u:%g %n' /home/dev/notes /testbed/README; stat -c '%a %n' /bin/suid; "
    "stat -c '%h %i' /testbed/README /testbed/README.link | sort -u | wc -l; cat /testbed/readme; "
    # read-only below the writable layer: the root and the system directories; the image's own
    # /testbed is written in place (copy-up into the guest's tmpfs)
    "touch /new-file 2>/dev/null || echo root-ro; echo x >> /etc/passwd 2>/dev/null || echo etc-ro; "
    "rm -f /bin/suid 2>/dev/null; test -e /bin/suid && echo bin-ro; "
    "echo more >> /testbed/README && cat /testbed/README")


def test_an_oci_image_is_the_guests_root_from_a_disk_made_once(registry_factory, oci_layout, tmp_path):
    nonce = os.urandom(8).hex()  # content of this run's own: a disk left by another is not reused
    reg = registry_factory()
    lay = oci_layout()
    lay.tag(lay.new_image(oci_image_layers(f"one {nonce}\n"), config=CONFIG), "1")
    reg.push(lay.path, "1", "team/vm-task")
    ref = f"{reg.host}/team/vm-task:1"
    env = {**os.environ, "CORDON_INSECURE_REGISTRIES": reg.host}

    # No command: the image's Cmd, in its WorkingDir; the disk is made, and said so.
    r = run(["--tier", "microvm", "--image", ref], timeout=600, env=env)
    assert (r.code, r.stdout) == (0, "default-cmd\n/testbed\n"), r
    assert BUILDING in r.stderr, r.stderr
    disk = disk_of(ref)
    first = os.stat(disk)
    with mounted(disk, str(tmp_path / "mnt")) as root:
        check_disk_tree(root)

    r = run(["--tier", "microvm", "--image", ref, "--", "sh", "-c", GUEST_SCRIPT], timeout=300, env=env)
    assert r.code == 0, r
    assert BUILDING not in r.stderr, r.stderr  # made once: the second create reuses it
    again = os.stat(disk)
    assert (again.st_ino, again.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    lines = r.stdout.splitlines()
    assert lines[:2] == ["yes", f"one {nonce}"], lines
    assert "passwd" in lines and "gone" not in lines and "later-gone" not in lines
    assert "new" in lines and "old" not in lines
    assert "1000:1000 /home/dev/notes" in lines and "0:0 /testbed/README" in lines
    assert "4755 /bin/suid" in lines
    assert "1" in lines  # one inode for the hard link's two names
    assert lines[-5:] == ["root-ro", "etc-ro", "bin-ro", "hello", "more"], lines

    # The same tag pushed again with other content: a new manifest, a new disk; the old one stays
    # until a prune finds that no reference names it, and rm takes the image's own.
    lay.tag(lay.new_image(oci_image_layers(f"two {nonce}\n"), config=CONFIG), "1")
    reg.push(lay.path, "1", "team/vm-task")
    r = run(["--tier", "microvm", "--image", ref, "--pull", "always", "--", "cat", "/version"], timeout=600, env=env)
    assert (r.code, r.stdout) == (0, f"two {nonce}\n"), r
    assert BUILDING in r.stderr, r.stderr
    second = disk_of(ref)
    assert second != disk and os.path.exists(second) and os.path.exists(disk)
    r = cordon("image", "prune")
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(disk) and os.path.exists(second)
    assert cordon("image", "rm", ref).returncode == 0
    assert not os.path.exists(second)
    assert not [n for n in os.listdir(os.path.join(cordonlib.VM_DIR, "images")) if n.endswith((".tmp", ".work"))]


def children_named(pid, name):
    found = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/stat") as f:
                st = f.read()
        except (OSError, ValueError):
            continue
        comm, rest = st[st.index("(") + 1:st.rindex(")")], st[st.rindex(")") + 2:].split()
        if comm == name and int(rest[1]) == pid:
            found.append(int(p))
    return found


def test_cordond_runs_an_oci_image_on_the_microvm_tier(daemon, oci_layout):
    """The image's Env and WorkingDir reach the guest through cordond as on the container tier.
    Its disk and its guests' snapshot (this image's first) are made by a child of cordond, while
    cordond keeps answering. Caught (with the making in cordond's loop, as before): no such child,
    and no other request answered until the disk and the snapshot were there."""
    lay = oci_layout()
    lay.tag(lay.new_image(oci_image_layers(os.urandom(8).hex()), config=CONFIG), "v1")  # this test's own
    ref = f"oci:{lay.path}:v1"
    assert cordon("image", "pull", ref).returncode == 0
    made = {}

    def create():
        try:
            made["sb"] = Sandbox.create(endpoint=daemon.endpoint, tier="microvm", image=ref)
        except Exception as e:  # told below
            made["error"] = e

    t = threading.Thread(target=create)
    t.start()
    try:
        cordonlib.wait_for(lambda: children_named(daemon.proc.pid, "cordond-prepare") or not t.is_alive(),
                           timeout=60, what="cordond's child that makes the disk and the snapshot")
        assert t.is_alive(), made
        st, health = daemon.http("GET", "/v1/health")
        assert st == 200 and health["status"] == "ok", health
        assert children_named(daemon.proc.pid, "cordond-prepare") and t.is_alive()  # answered meanwhile
    finally:
        t.join(timeout=600)
    assert "sb" in made, made
    with made["sb"] as sb:
        r = sb.exec(["sh", "-c", "echo $FROM_IMAGE $SHARED; pwd; stat -c %u /home/dev/notes; cat /testbed/README"])
        assert (r.exit_code, r.stdout) == (0, "yes image\n/testbed\n1000\nhello\n"), r
    disk = disk_of(ref)
    assert os.path.exists(disk)
    # DELETE /v1/images/{ref} takes the disk with the image's last reference.
    ep = daemon.endpoint
    cordonlib.wait_for(lambda: images.get(ref, endpoint=ep)["in_use"] == 0, timeout=15, what="teardown")
    assert images.remove(ref, endpoint=ep)["image_removed"] is True
    assert not os.path.exists(disk)


def test_two_makers_of_one_disk_at_once_make_it_once(oci_layout):
    """Two `cordon vm prepare --image REF` at once: one makes the disk under the images' lock, the
    other waits and finds it; both name the same file."""
    lay = oci_layout()
    lay.tag(lay.new_image(oci_image_layers(os.urandom(8).hex()), config=CONFIG), "1")
    ref = f"oci:{lay.path}:1"
    assert cordon("image", "pull", ref).returncode == 0
    procs = [subprocess.Popen([cordonlib.CORDON_BIN, "vm", "prepare", "--image", ref], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    disk = disk_of(ref)
    assert [out.splitlines()[-1] for out, _ in outs] == [disk, disk], outs
    assert sum(BUILDING in err for _, err in outs) == 1, outs
    assert cordon("image", "rm", ref).returncode == 0
    assert not os.path.exists(disk)


def test_an_image_of_one_layer_boots(oci_layout):
    """A flattened image (one layer, as `docker export | docker import` makes): its merge gets an
    empty layer beneath it. Caught (before): the overlay of a single lower layer is EINVAL, and no
    such image could run on this tier."""
    lay = oci_layout()
    lay.tag(lay.new_image([busybox_layer().file("one", os.urandom(8).hex())], config=CONFIG), "1")
    ref = f"oci:{lay.path}:1"
    assert cordon("image", "pull", ref).returncode == 0
    try:
        r = run(["--tier", "microvm", "--image", ref, "--", "sh", "-c", "cat /one; head -1 /etc/passwd"],
                timeout=300)
        assert r.code == 0 and r.stdout.endswith("root:x:0:0:root:/root:/bin/sh\n"), r
        assert not os.path.exists(disk_of(ref)[:-len(".erofs")] + ".work")
    finally:
        assert cordon("image", "rm", ref).returncode == 0


def test_an_image_of_many_layers_makes_its_disk(oci_layout, tmp_path):
    """100 layers (the store takes 128): each adds a file and deletes the one before, so only the
    last is left; their paths would not fit one page of mount options without the short links."""
    nonce = os.urandom(8).hex()
    layers = [Layer().file(f"f{i}", f"{nonce} {i}\n") for i in range(100)]
    for i in range(1, 100):
        layers[i].whiteout(f"f{i - 1}")
    lay = oci_layout()
    lay.tag(lay.new_image(layers, config=CONFIG), "1")
    ref = f"oci:{lay.path}:1"
    assert cordon("image", "pull", ref).returncode == 0
    r = subprocess.run([cordonlib.CORDON_BIN, "vm", "prepare", "--image", ref], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    disk = disk_of(ref)
    assert r.stdout.splitlines()[-1] == disk
    with mounted(disk, str(tmp_path / "mnt")) as root:
        assert os.listdir(root) == ["f99"]
        with open(os.path.join(root, "f99")) as f:
            assert f.read() == f"{nonce} 99\n"
    assert cordon("image", "rm", ref).returncode == 0
    assert not os.path.exists(disk)
