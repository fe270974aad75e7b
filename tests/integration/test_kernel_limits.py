"""Per-user kernel limits (issue 18, item 7): what the kernel counts per user — inotify instances,
queued signals, user namespaces, POSIX message queue bytes — is counted per sandbox, never against
host root; and the pseudo-terminals one sandbox may hold are bounded (limits.ptys), so that
another's PTY exec still gets one.

The kernel charges these counts to (user namespace, uid) and, up the chain, to each namespace's
owner in its parent: a container's user namespace owned by host root made every sandbox's counts
host root's. A sandbox fills its share here with a holder process that stays alive while the test
looks from outside; the host side's probes run in a fresh python3 (a failed one must not leave
pytest's own process without inotify or signals)."""

import fcntl
import os
import subprocess
import sys

from cordon import Sandbox
from cordonlib import EXIT_CORDON, SANDBOX_UID_MIN, Running, find_sandbox_proc, run, wait_for

NS_GET_OWNER_UID = 0xb704  # _IO(0xb7, 0x4), linux/nsfs.h

# Run by python3 in a sandbox: take as many of one kernel resource as it gives, write how many and
# why it stopped to /tmp/held, and keep them (a child in a session of its own, so that the exec
# that started it ends).
HOLDER = r"""
import ctypes, errno, os, signal, sys, threading, time
what = sys.argv[1]
if os.fork():
    os._exit(0)
os.setsid()
libc = ctypes.CDLL(None, use_errno=True)
held, why = [], "limit not reached"
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
tid = threading.get_ident()
for _ in range(200000):
    try:
        if what == "inotify":
            fd = libc.inotify_init1(0)
            if fd < 0:
                raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
            held.append(fd)
        elif what == "pty":
            held.append(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
        elif what == "rtsig":
            signal.pthread_kill(tid, signal.SIGRTMIN)  # SI_TKILL: counted against RLIMIT_SIGPENDING
            held.append(1)
    except OSError as e:
        why = errno.errorcode.get(e.errno, str(e.errno))
        break
with open("/tmp/held.new", "w") as f:
    f.write(f"{len(held)} {why}\n")
os.rename("/tmp/held.new", "/tmp/held")
time.sleep(600)
"""

# Run on the host or in a sandbox: can this user still take one of `what`? Prints "ok" or the errno.
PROBE = r"""
import ctypes, errno, os, signal, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
what = sys.argv[1]
try:
    if what == "inotify":
        if libc.inotify_init1(0) < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
    elif what == "rtsig":
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
        for _ in range(32):
            signal.pthread_kill(threading.get_ident(), signal.SIGRTMIN)
    elif what == "pty":
        os.openpty()
    print("ok")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
"""


def hold(sb, what):
    """Start the holder of `what` in sb; (count, why it stopped) once it holds them."""
    r = sb.exec(["sh", "-c", 'python3 -c "$0" "$1" </dev/null >/dev/null 2>&1', HOLDER, what], timeout_s=60)
    assert r.exit_code == 0, r

    def held():
        out = sb.exec(["cat", "/tmp/held"]).stdout.split()
        return out if len(out) == 2 else None

    n, why = wait_for(held, timeout=60, interval=0.2, what=f"the sandbox's holder of {what}")
    return int(n), why


def probe_in(sb, what):
    r = sb.exec(["python3", "-c", PROBE, what], timeout_s=60)
    assert r.exit_code == 0, r
    return r.stdout.strip()


def probe_on_host(what):
    return subprocess.run([sys.executable, "-c", PROBE, what], capture_output=True, text=True,
                          timeout=60).stdout.strip()


def two_sandboxes(daemon, tier, **spec):
    return (Sandbox.create(endpoint=daemon.endpoint, tier=tier, **spec),
            Sandbox.create(endpoint=daemon.endpoint, tier=tier, **spec))


def userns_owner(pid):
    fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    try:
        buf = bytearray(4)
        fcntl.ioctl(fd, NS_GET_OWNER_UID, buf)
        return int.from_bytes(buf, sys.byteorder)
    finally:
        os.close(fd)


def test_user_namespace_is_owned_by_the_slot_uid(daemon):
    """A container's user namespace belongs to its slot's host uid (the uid its root is), both
    from cordond and from `cordon run`: that owner is whom the kernel charges. Seen failing before
    the fix: owner 0."""
    with Sandbox.create(endpoint=daemon.endpoint) as sb:
        r = sb.exec(["sh", "-c", "sleep 30 </dev/null >/dev/null 2>&1 & echo started"])
        assert r.stdout == "started\n"
        p = find_sandbox_proc(lambda p: p.cmdline == "sleep 30")
        assert p.uid >= SANDBOX_UID_MIN and userns_owner(p.pid) == p.uid, (p.uid, userns_owner(p.pid))
    with Running(["--", "sleep", "31"]):
        p = find_sandbox_proc(lambda p: p.cmdline == "sleep 31")
        assert p.uid >= SANDBOX_UID_MIN and userns_owner(p.pid) == p.uid, (p.uid, userns_owner(p.pid))


def test_inotify_instances_are_the_sandboxs_own(daemon, tier):
    """One sandbox takes every inotify instance it is given; host root and another sandbox still
    get theirs. Seen failing before the fix (container tier): the first sandbox's 128 instances
    were host root's (max_user_instances), and host root's inotify_init then failed with EMFILE."""
    a, b = two_sandboxes(daemon, tier)
    with a, b:
        n, why = hold(a, "inotify")
        assert why == "EMFILE" and n > 0, (n, why)
        assert probe_on_host("inotify") == "ok"
        assert probe_in(b, "inotify") == "ok"


def test_queued_signals_are_the_sandboxs_own(daemon, tier):
    """One sandbox queues real-time signals until the kernel refuses (EAGAIN: RLIMIT_SIGPENDING);
    host root and another sandbox can still queue theirs. Seen failing before the fix (container
    tier): the queue counted against host root, whose own sigqueue then got EAGAIN."""
    a, b = two_sandboxes(daemon, tier)
    with a, b:
        n, why = hold(a, "rtsig")
        assert why == "EAGAIN" and n > 0, (n, why)
        assert probe_on_host("rtsig") == "ok"
        assert probe_in(b, "rtsig") == "ok"


def pty_exec(daemon, sb):
    return daemon.http("POST", f"/v1/sandboxes/{sb.id}/exec",
                       {"cmd": ["sh", "-c", "tty"], "pty": {"rows": 24, "cols": 80}})


def test_ptys_are_bounded_per_sandbox(daemon, tier):
    """One sandbox opens /dev/ptmx until refused: it gets at most limits.ptys (64 by default), and
    another's PTY exec still runs. Seen failing before the fix (container tier): the first took all
    the ptys the kernel gives to devpts instances other than the host's (pty/max - pty/reserve),
    and the second's PTY exec got 400 (posix_openpt: ENOSPC)."""
    if tier == "process":
        # The process tier has no terminal of its own: Landlock keeps /dev/ptmx out of reach, so a
        # worker can take none of the host's (docs/process.md).
        a = Sandbox.create(endpoint=daemon.endpoint, tier=tier)
        with a:
            assert probe_in(a, "pty") in ("EACCES", "EPERM")
        return
    a, b = two_sandboxes(daemon, tier, nofile=8192)
    with a, b:
        n, why = hold(a, "pty")
        assert why == "ENOSPC" and n > 0, (n, why)
        status, resp = pty_exec(daemon, b)
        assert status == 200 and resp["exit_code"] == 0 and "/dev/pts/" in resp["stdout"], (status, resp)
        assert probe_in(b, "pty") == "ok"
        if tier == "container":  # a VM guest's ptys are its own kernel's
            assert n <= 64, n


def test_pty_limit_is_the_spec(daemon):
    """limits.ptys sets the bound: the 4th pty of a sandbox of 3 is refused, a PTY exec then too."""
    with Sandbox.create(endpoint=daemon.endpoint, ptys=3) as a:
        n, why = hold(a, "pty")
        assert (n, why) == (3, "ENOSPC")
        status, resp = pty_exec(daemon, a)
        assert status == 400, (status, resp)
    status, resp = daemon.http("POST", "/v1/sandboxes", {"limits": {"ptys": 0}})
    assert status == 400 and resp["error"]["field"] == "limits.ptys", resp
    # cordon run --ptys: the same bound on a one-shot sandbox
    r = run(["--ptys", "2", "--", "python3", "-c", "import os\nfds = []\ntry:\n    while len(fds) < 10:\n"
             "        fds.append(os.open('/dev/ptmx', os.O_RDWR | os.O_NOCTTY))\nexcept OSError as e:\n"
             "    print(len(fds), e.errno)"])
    assert (r.code, r.stdout) == (0, "2 28\n"), r  # ENOSPC
    r = run(["--ptys", "none", "--", "true"])
    assert r.code == EXIT_CORDON and "limits.ptys" in r.stderr, r
