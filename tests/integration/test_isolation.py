"""What a command sees inside a container-tier sandbox (DESIGN §5): the
filesystem, /proc and /dev, privileges, seccomp, namespaces, the uid mapping
as seen from the host, bind mounts and directory images."""

import os

import pytest

from cordonlib import (SANDBOX_UID_MIN, UID_RANGE, EXIT_CORDON, Running, find_sandbox_proc,
                       run)

# ---------------------------------------------------------------- filesystem


def test_usr_is_read_only():
    r = run(["--", "sh", "-c", "touch /usr/cordon-probe; echo rc=$?; mkdir /usr/lib/cordon-probe; echo rc=$?"])
    assert r.stdout == "rc=1\nrc=1\n", r.stderr
    assert r.stderr.count("Read-only file system") == 2, r.stderr
    assert not os.path.exists("/usr/cordon-probe")


def test_usr_is_the_hosts():
    r = run(["--", "python3", "-c", "import os; print(os.listdir('/usr/bin').__len__())"])
    assert r.code == 0, r.stderr
    assert int(r.stdout) == len(os.listdir("/usr/bin"))


def test_etc_is_not_writable():
    r = run(["--", "python3", "-c", """
import errno
res = []
for path, mode in (("/etc/passwd", "a"), ("/etc/cordon-probe", "w"), ("/etc/hosts", "w")):
    try:
        open(path, mode).close()
        res.append("ok")
    except OSError as e:
        res.append(errno.errorcode[e.errno])
print(" ".join(res))
"""])
    assert r.code == 0, r.stderr
    assert set(r.stdout.split()) <= {"EACCES", "EROFS", "EPERM"}, r.stdout
    assert len(r.stdout.split()) == 3
    assert not os.path.exists("/etc/cordon-probe")


def test_etc_is_minimal_and_not_the_hosts():
    r = run(["--", "sh", "-c", "ls /etc; grep -c . /etc/passwd"])
    assert r.code == 0, r.stderr
    names = r.stdout.split()
    for want in ("passwd", "group", "hosts", "resolv.conf", "nsswitch.conf"):
        assert want in names
    assert "shadow" not in names and "gshadow" not in names
    assert "machine-id" not in names


def test_host_secrets_are_not_visible():
    r = run(["--", "sh", "-c", "ls /root; ls -a /home; test -e /etc/shadow && echo shadow; "
             "test -e /work && echo work; test -e /var/lib/cordon && echo state; true"])
    assert r.code == 0, r.stderr
    for bad in ("shadow", "work", "state"):
        assert bad not in r.stdout.split()


@pytest.mark.parametrize("d", ["/workspace", "/tmp", "/var/tmp", "/root", "/home", "/run", "/dev/shm"])
def test_writable_dirs(d):
    r = run(["--", "sh", "-c", f"echo data > {d}/probe && cat {d}/probe"])
    assert (r.code, r.stdout) == (0, "data\n"), r.stderr


def test_root_outside_writable_dirs_is_refused():
    r = run(["--", "sh", "-c", "touch /opt/probe || touch /probe-file || mkdir /srv/x || echo refused"])
    assert r.stdout.strip().endswith("refused"), (r.stdout, r.stderr)


def test_writes_do_not_reach_the_host_or_the_next_sandbox():
    r = run(["--", "sh", "-c", "echo one > /tmp/cordon-it-persist; echo one > /workspace/p"])
    assert r.code == 0, r.stderr
    assert not os.path.exists("/tmp/cordon-it-persist")
    r = run(["--", "sh", "-c", "ls /tmp /workspace"])
    assert "cordon-it-persist" not in r.stdout and "p" not in r.stdout.split()


def test_read_only_root():
    script = ("for d in /workspace /tmp /var/tmp /root /home /run /dev/shm; do "
              "echo x > $d/ro-probe || echo FAIL $d; done; "
              "touch /opt/x 2>&1; mkdir /newdir 2>&1; grep ' / / ' /proc/self/mountinfo")
    r = run(["--read-only", "--", "sh", "-c", script])
    assert "FAIL" not in r.stdout, r.stdout
    assert r.stdout.count("Read-only file system") == 2, r.stdout
    root_line = r.stdout.strip().splitlines()[-1]
    assert " ro," in root_line or root_line.split()[5].startswith("ro"), root_line


# ---------------------------------------------------------------- /proc and /dev

MASKED = ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/kallsyms", "/proc/sched_debug",
          "/proc/latency_stats", "/proc/timer_stats", "/proc/sysrq-trigger", "/proc/acpi", "/proc/scsi",
          "/proc/asound"]


def test_masked_proc_paths():
    present = [p for p in MASKED if os.path.exists(p)]
    assert present, "none of the OCI masked paths exists on this host"
    script = """
import os, stat, sys
for p in sys.argv[1:]:
    try:
        st = os.stat(p)
    except OSError as e:
        print(p, "gone", e.errno); continue
    try:
        if stat.S_ISDIR(st.st_mode):
            print(p, "dir", len(os.listdir(p)))
        elif stat.S_ISCHR(st.st_mode):
            print(p, "chr", os.major(st.st_rdev), os.minor(st.st_rdev), len(open(p, "rb").read(4096)))
        else:
            print(p, "file", len(open(p, "rb").read(4096)))
    except PermissionError:
        print(p, "refused", 0)  # the monitor refuses opens of the masks (a "kernel" violation)
"""
    r = run(["--", "python3", "-c", script, *present])
    assert r.code == 0, r.stderr
    for line in r.stdout.splitlines():
        p, kind, *rest = line.split()
        if kind == "dir":
            assert rest == ["0"], f"{p} is not empty inside: {line}"
        elif kind == "chr":
            assert rest == ["1", "3", "0"], f"{p} is not /dev/null inside: {line}"
        elif kind == "file":
            assert rest == ["0"], f"{p} has content inside: {line}"
        else:
            assert kind == "refused", line
    assert len(r.stdout.splitlines()) == len(present)


@pytest.mark.parametrize("tier", ["container", "process"])
def test_masked_proc_directories_take_no_writes(tier):
    """The masked directories share one empty directory of the sandbox's layer (proc-mask.c), bound read-only:
    a file made in one would stand in all of them, and in the layer's checkpoints. Seen failing with that bind
    left writable: only the directory's mode (0555, owned by an unmapped host uid) still refused the writes,
    "Permission denied" rather than "Read-only file system"."""
    dirs = [p for p in ("/proc/acpi", "/proc/scsi", "/proc/asound") if os.path.isdir(p)]
    if not dirs:
        pytest.skip("none of the masked /proc directories exists on this host's kernel")
    script = "; ".join(f"touch {d}/x; mkdir {d}/y; mount -o remount,rw {d}" for d in dirs) + \
        "; find " + " ".join(dirs) + " -mindepth 1 | wc -l"
    r = run(["--tier", tier, "--", "sh", "-c", script])
    assert r.stdout.strip().splitlines()[-1] == "0", r.stdout + r.stderr
    assert r.stderr.count("Read-only file system") >= 2 * len(dirs), r.stderr


def test_kernel_secrets_are_not_readable():
    r = run(["--", "sh", "-c", "cat /proc/kallsyms /proc/keys /proc/timer_list 2>/dev/null | wc -c"])
    assert r.stdout.strip() == "0"


@pytest.mark.parametrize("path", ["/proc/sys/kernel/hostname", "/proc/sys/vm/drop_caches",
                                  "/proc/sys/kernel/core_pattern"])
def test_proc_sys_is_read_only(path):
    r = run(["--", "sh", "-c", f"echo x > {path}"])
    assert r.code != 0
    assert "Read-only file system" in r.stderr or "Permission denied" in r.stderr, r.stderr


def test_proc_readonly_subtrees_are_mounted_ro():
    r = run(["--", "cat", "/proc/self/mountinfo"])
    assert r.code == 0, r.stderr
    opts = {}
    for line in r.stdout.splitlines():
        f = line.split()
        opts[f[4]] = f[5].split(",")
    for p in ("/proc/sys", "/proc/bus", "/proc/fs", "/proc/irq"):
        if os.path.exists(p):
            assert "ro" in opts.get(p, []), f"{p} not mounted read-only: {opts.get(p)}"


def test_proc_is_fresh_and_shows_only_the_sandbox():
    r = run(["--", "sh", "-c", "cat /proc/1/comm; ls /proc | grep -c '^[0-9]'"])
    assert r.code == 0, r.stderr
    comm, count = r.stdout.split()
    assert comm == "cordon-init"
    assert int(count) <= 5  # init, sh, the pipeline


def test_dev_is_minimal():
    r = run(["--", "python3", "-c", """
import os, stat
for n in sorted(os.listdir('/dev')):
    st = os.lstat('/dev/' + n)
    kind = 'blk' if stat.S_ISBLK(st.st_mode) else 'chr' if stat.S_ISCHR(st.st_mode) else \
           'lnk' if stat.S_ISLNK(st.st_mode) else 'dir' if stat.S_ISDIR(st.st_mode) else 'other'
    print(n, kind)
"""])
    assert r.code == 0, r.stderr
    entries = dict(line.split() for line in r.stdout.splitlines())
    for n in ("null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm", "fd",
              "stdin", "stdout", "stderr"):
        assert n in entries, f"/dev/{n} missing: {entries}"
    for n in ("null", "zero", "full", "random", "urandom"):
        assert entries[n] == "chr"
    assert "blk" not in entries.values()
    allowed = {"null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm", "fd",
               "stdin", "stdout", "stderr", "console", "mqueue"}
    assert set(entries) <= allowed, f"unexpected /dev entries: {set(entries) - allowed}"


def test_dev_nodes_work():
    r = run(["--", "sh", "-c", "head -c 16 /dev/urandom | wc -c; head -c 8 /dev/zero | od -An -tx1 | tr -d ' \\n'; "
             "echo; echo x > /dev/null && echo null-ok; echo x > /dev/full || echo full-ok"])
    assert r.stdout == "16\n0000000000000000\nnull-ok\nfull-ok\n", (r.stdout, r.stderr)


def test_no_raw_device_access():
    r = run(["--", "sh", "-c", "for d in /dev/mem /dev/kmem /dev/port /dev/sda /dev/vda; do "
             "test -e $d && echo $d; done; mknod /dev/shm/m c 1 1 && echo mknod-ok; true"])
    assert r.stdout == "", r.stdout


# ---------------------------------------------------------------- privileges


def status_fields(text):
    return {k: v.strip() for k, _, v in (l.partition(":") for l in text.splitlines())}


def test_no_capabilities_no_new_privs_seccomp_filter():
    r = run(["--", "cat", "/proc/self/status"])
    assert r.code == 0, r.stderr
    st = status_fields(r.stdout)
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(st[cap], 16) == 0, f"{cap}={st[cap]}"
    assert st["NoNewPrivs"] == "1"
    assert st["Seccomp"] == "2"


def test_init_keeps_only_what_it_needs_to_run_and_signal_users():
    """init (pid 1, in the sandbox's user namespace only) keeps CAP_KILL effective, to signal commands
    running as another user (timeouts, SIGNAL, QUIESCE), and SETUID, SETGID and SETPCAP permitted
    only, for each command's child to take its user and then drop everything; nothing else, nothing
    inheritable or ambient (docs/security.md). The commands themselves hold none (the test above)."""
    r = run(["--", "cat", "/proc/1/status"])
    assert r.code == 0, r.stderr
    st = status_fields(r.stdout)
    kill, setgid, setuid, setpcap = 1 << 5, 1 << 6, 1 << 7, 1 << 8
    assert int(st["CapEff"], 16) == kill, st["CapEff"]
    assert int(st["CapPrm"], 16) == int(st["CapBnd"], 16) == kill | setgid | setuid | setpcap, st
    assert int(st["CapInh"], 16) == 0 and int(st["CapAmb"], 16) == 0, st
    assert st["NoNewPrivs"] == "1" and st["Seccomp"] == "2"


def test_inside_uid_is_zero():
    r = run(["--", "sh", "-c", "id -u; id -g"])
    assert r.stdout == "0\n0\n", r.stderr


SYSCALL_PROBE = r"""
import ctypes, errno, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]
def mnt():
    r = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)
    return "ok" if r == 0 else errno.errorcode[ctypes.get_errno()]
def sock(family, type_, proto=0):
    try:
        socket.socket(family, type_, proto).close(); return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
# x86_64 syscall numbers
tests = {
    "mount": mnt,
    "umount2": lambda: sc(166, 0, 0),
    "unshare_user": lambda: sc(272, 0x10000000),
    "unshare_ns": lambda: sc(272, 0x00020000),
    "setns": lambda: sc(308, 0, 0),
    "ptrace": lambda: sc(101, 16, 1, 0, 0),
    "bpf": lambda: sc(321, 0, 0, 0),
    "io_uring_setup": lambda: sc(425, 1, 0),
    "keyctl": lambda: sc(250, 0, 0, 0, 0),
    "add_key": lambda: sc(248, 0, 0, 0, 0, 0),
    "userfaultfd": lambda: sc(323, 0),
    "perf_event_open": lambda: sc(298, 0, 0, -1, -1, 0),
    "clone3": lambda: sc(435, 0, 0),
    "pivot_root": lambda: sc(155, 0, 0),
    "kexec_load": lambda: sc(246, 0, 0, 0, 0),
    "init_module": lambda: sc(175, 0, 0, 0),
    "raw_socket": lambda: sock(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
    "packet_socket": lambda: sock(socket.AF_PACKET, socket.SOCK_RAW),
}
for name in sys.argv[1:]:
    print(name, tests[name]())
"""

DENIED = {
    "mount": "EPERM", "umount2": "EPERM", "unshare_user": "EPERM", "unshare_ns": "EPERM", "setns": "EPERM",
    "ptrace": "EPERM", "bpf": "EPERM", "io_uring_setup": "EPERM", "keyctl": "EPERM", "add_key": "EPERM",
    "userfaultfd": "EPERM", "perf_event_open": "EPERM", "clone3": "ENOSYS", "pivot_root": "EPERM",
    "kexec_load": "EPERM", "init_module": "EPERM", "raw_socket": "EPERM", "packet_socket": "EPERM",
}


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="syscall numbers are x86_64's")
def test_seccomp_denials():
    r = run(["--", "python3", "-c", SYSCALL_PROBE, *DENIED])
    assert r.code == 0, r.stderr
    got = dict(line.split() for line in r.stdout.splitlines())
    assert got == DENIED


def test_unshare_command_fails():
    r = run(["--", "unshare", "-U", "true"])
    assert r.code != 0
    assert "Operation not permitted" in r.stderr, r.stderr


def test_ordinary_work_still_runs_under_seccomp():
    # fork/exec, threads, pipes, sockets on lo-less unix paths, mmap
    r = run(["--", "python3", "-c", """
import threading, subprocess, socket, mmap, os
t = threading.Thread(target=lambda: None); t.start(); t.join()
print(subprocess.run(["echo", "child"], capture_output=True, text=True).stdout.strip())
a, b = socket.socketpair(); a.send(b"hi"); print(b.recv(2).decode())
m = mmap.mmap(-1, 4096); m[:2] = b"ok"; print(m[:2].decode())
"""])
    assert (r.code, r.stdout) == (0, "child\nhi\nok\n"), r.stderr


def test_common_ioctls_are_allowed():
    # Non-blocking sockets (Python's setblocking/settimeout use FIONBIO), and so
    # asyncio, and terminal queries must work; only TIOCSTI/TIOCLINUX are denied.
    r = run(["--", "python3", "-c", """
import asyncio, ctypes, errno, socket
libc = ctypes.CDLL(None, use_errno=True)
a, b = socket.socketpair()
a.setblocking(False); print("setblocking ok")
a.settimeout(1.5); print("settimeout ok")
n = ctypes.c_int(0); b.send(b"xyz")
r = libc.ioctl(a.fileno(), 0x541B, ctypes.byref(n))  # FIONREAD
print("FIONREAD", n.value if r == 0 else errno.errorcode[ctypes.get_errno()])
async def main():
    await asyncio.sleep(0)
    return "asyncio ok"
print(asyncio.run(main()))
"""])
    assert r.stdout == "setblocking ok\nsettimeout ok\nFIONREAD 3\nasyncio ok\n", r.stderr
    assert r.code == 0


def test_tiocsti_is_denied_other_ioctls_reach_the_kernel():
    # On /dev/null the kernel answers ENOTTY to terminal ioctls; TIOCSTI must be
    # stopped by seccomp (EPERM) before it gets there.
    r = run(["--", "python3", "-c", """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("/dev/null", os.O_RDWR)
buf = ctypes.create_string_buffer(64)
for name, req in (("TIOCSTI", 0x5412), ("TIOCLINUX", 0x541C), ("TCGETS", 0x5401)):
    r = libc.ioctl(fd, req, buf)
    print(name, errno.errorcode[ctypes.get_errno()] if r < 0 else "ok")
"""])
    assert r.stdout == "TIOCSTI EPERM\nTIOCLINUX EPERM\nTCGETS ENOTTY\n", r.stderr


def test_pty_can_be_opened():
    r = run(["--", "python3", "-c", """
import os
m, s = os.openpty()
os.write(m, b"ping\\n")
print(os.read(s, 5).decode().strip(), os.ttyname(s).startswith("/dev/pts/"))
"""])
    assert (r.code, r.stdout) == (0, "ping True\n"), r.stderr


# ---------------------------------------------------------------- namespaces


def test_only_loopback_in_the_network_namespace():
    r = run(["--", "cat", "/proc/net/dev"])
    assert r.code == 0, r.stderr
    ifaces = [l.split(":")[0].strip() for l in r.stdout.splitlines()[2:]]
    assert ifaces == ["lo"]


def test_no_route_out():
    r = run(["--", "python3", "-c", """
import socket, errno
s = socket.socket()
try:
    s.connect(("1.1.1.1", 80)); print("connected")
except OSError as e:
    print(errno.errorcode.get(e.errno, e))
"""])
    assert r.code == 0, r.stderr
    assert r.stdout.strip() in ("ENETUNREACH", "EHOSTUNREACH"), r.stdout


def test_loopback_works():
    r = run(["--", "python3", "-c", """
import socket, threading
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
def serve():
    c, _ = srv.accept(); c.sendall(c.recv(5).upper()); c.close()
t = threading.Thread(target=serve); t.start()
cl = socket.create_connection(srv.getsockname()); cl.sendall(b"hello"); print(cl.recv(5).decode()); t.join()
"""])
    assert (r.code, r.stdout) == (0, "HELLO\n"), r.stderr


def test_pid_namespace_init_is_cordon_init():
    r = run(["--", "sh", "-c", 'echo $$; cat /proc/1/cmdline | tr "\\0" " "'])
    assert r.code == 0, r.stderr
    pid, init = r.stdout.splitlines()
    assert int(pid) > 1
    assert "cordon-init" in init


def test_namespaces_differ_from_the_hosts():
    kinds = ["user", "pid", "mnt", "net", "ipc", "uts", "cgroup", "time"]
    host = {k: os.readlink(f"/proc/self/ns/{k}") for k in kinds}
    r = run(["--", "sh", "-c", "for k in " + " ".join(kinds) + "; do readlink /proc/self/ns/$k; done"])
    assert r.code == 0, r.stderr
    inside = dict(zip(kinds, r.stdout.split()))
    for k in kinds:
        assert inside[k] != host[k], f"{k} namespace is the host's"


# ---------------------------------------------------------------- uid mapping


def uid_map_inside(r_stdout):
    inside, base, count = r_stdout.split()[:3]
    return int(inside), int(base), int(count)


def test_uid_map_inside():
    r = run(["--", "cat", "/proc/self/uid_map", "/proc/self/gid_map"])
    assert r.code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        inside, base, count = (int(x) for x in line.split())
        assert inside == 0 and count == UID_RANGE
        assert base >= SANDBOX_UID_MIN


def test_uid_seen_from_host_and_distinct_per_sandbox():
    tag_a, tag_b = "1001.25", "1002.25"  # unusual sleep arguments to find them on the host
    with Running(["--", "sh", "-c", f"cat /proc/self/uid_map; exec sleep {tag_a}"]) as a, \
            Running(["--", "sh", "-c", f"cat /proc/self/uid_map; exec sleep {tag_b}"]) as b:
        pa = find_sandbox_proc(lambda p: p.cmdline == f"sleep {tag_a}")
        pb = find_sandbox_proc(lambda p: p.cmdline == f"sleep {tag_b}")
        assert pa.uid >= SANDBOX_UID_MIN and pb.uid >= SANDBOX_UID_MIN
        # distinct, non-overlapping ranges
        assert abs(pa.uid - pb.uid) >= UID_RANGE
        # the host's view of each process agrees with the sandbox's own uid_map
        host_status = status_fields(open(f"/proc/{pa.pid}/status").read())
        assert all(int(u) == pa.uid for u in host_status["Uid"].split())
        assert all(int(g) >= SANDBOX_UID_MIN for g in host_status["Gid"].split())
        # each sandbox's own uid_map names the base the host sees
        for s, p in ((a, pa), (b, pb)):
            _, base, count = uid_map_inside(s.proc.stdout.readline())
            assert (base, count) == (p.uid, UID_RANGE)


# ---------------------------------------------------------------- bind mounts


def test_bind_mount_read_write(shared_dir):
    # shared_dir is 0777: on the host the sandbox's root is an unprivileged
    # uid (>= 2^30), so it can only write where "other" may.
    with open(os.path.join(shared_dir, "in.txt"), "w") as f:
        f.write("from host\n")
    r = run(["--bind", f"{shared_dir}:/data", "--", "sh", "-c", "cat /data/in.txt; echo from sandbox > /data/out.txt"])
    assert (r.code, r.stdout) == (0, "from host\n"), r.stderr
    with open(os.path.join(shared_dir, "out.txt")) as f:
        assert f.read() == "from sandbox\n"
    st = os.stat(os.path.join(shared_dir, "out.txt"))
    assert st.st_uid >= SANDBOX_UID_MIN  # written as the sandbox's host uid, not as root


def test_bind_mount_read_only(shared_dir):
    with open(os.path.join(shared_dir, "in.txt"), "w") as f:
        f.write("from host\n")
    r = run(["--bind", f"{shared_dir}:/data:ro", "--",
             "sh", "-c", "cat /data/in.txt; echo x > /data/out.txt; echo rc=$?"])
    assert r.stdout.startswith("from host\nrc=") and r.stdout != "from host\nrc=0\n", (r.stdout, r.stderr)
    assert "Read-only file system" in r.stderr
    assert not os.path.exists(os.path.join(shared_dir, "out.txt"))


def test_bind_mount_is_nosuid_nodev(shared_dir):
    r = run(["--bind", f"{shared_dir}:/data", "--", "grep", " /data ", "/proc/self/mountinfo"])
    assert r.code == 0, r.stderr
    opts = r.stdout.split()[5].split(",")
    assert "nosuid" in opts and "nodev" in opts


def test_bind_mount_of_a_file(shared_dir):
    src = os.path.join(shared_dir, "one.txt")
    with open(src, "w") as f:
        f.write("single file\n")
    os.chmod(src, 0o644)
    r = run(["--bind", f"{src}:/workspace/one.txt:ro", "--", "cat", "/workspace/one.txt"])
    assert (r.code, r.stdout) == (0, "single file\n"), r.stderr


def test_unreadable_bind_source_is_refused():
    # /root is 0700 on the host: the sandbox's unprivileged uid cannot reach it
    d = os.path.join("/root", ".cordon-it-private")
    os.makedirs(d, exist_ok=True)
    try:
        r = run(["--bind", f"{d}:/data", "--", "ls", "/data"])
        assert r.code == EXIT_CORDON
        assert r.cordon_lines and "mounts" in r.cordon_lines[0]
    finally:
        os.rmdir(d)


# ---------------------------------------------------------------- images


def test_image_directory(busybox_image):
    r = run(["--image", busybox_image, "--", "sh", "-c",
             "cat /etc/image-marker; test -e /usr/bin/python3 && echo has-python; ls /bin | grep -c .; echo hi > /tmp/x && cat /tmp/x"])
    assert r.code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "busybox-image"
    assert "has-python" not in lines  # not the host image
    assert int(lines[1]) > 50
    assert lines[2] == "hi"


def test_image_directory_is_not_modified(busybox_image):
    before = sorted(os.listdir(busybox_image))
    r = run(["--image", busybox_image, "--", "sh", "-c", "touch /new-file; rm -f /bin/ls; echo x > /etc/image-marker"])
    del r  # whatever the sandbox may or may not do, the image must not change
    assert sorted(os.listdir(busybox_image)) == before
    assert os.path.exists(os.path.join(busybox_image, "bin", "ls"))
    with open(os.path.join(busybox_image, "etc", "image-marker")) as f:
        assert f.read() == "busybox-image\n"


def test_image_directory_isolation(busybox_image):
    r = run(["--image", busybox_image, "--", "sh", "-c", "cat /proc/self/status | grep -E '^(CapEff|NoNewPrivs|Seccomp):'"])
    assert r.code == 0, r.stderr
    st = status_fields(r.stdout)
    assert int(st["CapEff"], 16) == 0 and st["NoNewPrivs"] == "1" and st["Seccomp"] == "2"


def test_image_file_instead_of_directory_is_refused(shared_dir):
    f = os.path.join(shared_dir, "not-a-dir")
    open(f, "w").close()
    r = run(["--image", f, "--", "true"])
    assert r.code == EXIT_CORDON
    assert r.cordon_lines and "image" in r.cordon_lines[0]
