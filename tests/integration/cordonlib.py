"""Framework for cordon's integration tests: drive the real `cordon run` binary
and check the host for kernel state a sandbox left behind.

Runs on the host as root, in the initial namespaces. Nothing here talks to
cordon's internals: what a test knows about a sandbox it learns the way an
operator would, from the exit status, the streams, the --json record and
/proc and /sys on the host.

Other people may run sandboxes on the same host while these tests run, so the
leak check only blames state that (a) appeared after the snapshot and (b) is
not owned by a live supervisor. A slot (cgroup slot-N, uid range N) is "live"
while some process that is not an orphan holds its lock file open: a running
`cordon run`, or the guard of one. A guard whose creator died is an orphan;
it gets a few seconds to clean up, then it is itself reported as a leak.
"""

import fcntl
import json
import os
import re
import signal
import sys
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORDON_BIN = os.environ.get("CORDON_BIN") or os.path.join(REPO, "build", "cordon")
CGROUP_ROOT = "/sys/fs/cgroup"

SANDBOX_UID_MIN = 1 << 30  # cordon maps sandboxes to host uids 2^30 and up
UID_RANGE = 65536
EXIT_TIMEOUT = 124
EXIT_CORDON = 125

RECORD_FIELDS = {
    "id": str,
    "tier": str,
    "exit_code": int,
    "signal": (int, type(None)),
    "error": (str, type(None)),
    "timed_out": bool,
    "oom_killed": bool,
    "wall_ms": (int, float),
    "cpu_user_ms": (int, float),
    "cpu_system_ms": (int, float),
    "memory_peak_bytes": int,
    "pids_limit_hits": int,
    "limits": dict,
    "violations": dict,
}


# ---------------------------------------------------------------- running


class RunResult(NamedTuple):
    code: int
    stdout: str
    stderr: str
    record: Optional[dict]  # the --json record, None without --json

    @property
    def cordon_lines(self):
        """cordon's own diagnostics on stderr ("cordon: …")."""
        return [l for l in self.stderr.splitlines() if l.startswith("cordon: ")]


def tcp_listener(workdir):
    """(flags, port, token) for a cordond that listens on 127.0.0.1 too: --listen on a free port and
    --token-file holding a fresh token (written in workdir)."""
    import socket
    token = "t0ken-" + os.urandom(12).hex()
    tf = os.path.join(workdir, "token")
    with open(tf, "w") as f:
        f.write(token + "\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return ["--listen", f"127.0.0.1:{port}", "--token-file", tf], port, token


def parse_record(stderr: str) -> Optional[dict]:
    """The --json record: the last stderr line that parses as a JSON object."""
    for line in reversed(stderr.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def cordon_argv(args):
    return [CORDON_BIN, "run", *[str(a) for a in args]]


def run(args, input=None, timeout=60, env=None) -> RunResult:
    """Run `cordon run ARGS…` to completion. input: str or None (stdin is
    /dev/null then, so nothing in the sandbox waits on the terminal)."""
    p = subprocess.run(
        cordon_argv(args),
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        env=env,
    )
    return RunResult(p.returncode, p.stdout, p.stderr, parse_record(p.stderr))


class Running:
    """A `cordon run` in the background. Use as a context manager: on exit it
    is killed (SIGKILL) if still running and always reaped."""

    def __init__(self, args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=None):
        self.proc = subprocess.Popen(
            cordon_argv(args),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            text=True,
            errors="replace",
            env=env,
        )
        self.pid = self.proc.pid

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=30) -> RunResult:
        out, err = self.proc.communicate(timeout=timeout)
        out, err = out or "", err or ""
        return RunResult(self.proc.returncode, out, err, parse_record(err))

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()


def wait_for(predicate, timeout=5.0, interval=0.01, what="condition"):
    """Poll predicate() until it returns something truthy; return that value.
    Raises AssertionError naming `what` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# ---------------------------------------------------------------- /proc


def read(path, default=None):
    try:
        with open(path, errors="replace") as f:  # /proc text can hold any bytes (argv)
            return f.read()
    except OSError:
        if default is None:
            raise
        return default


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    uid: int  # real uid
    state: str  # one letter
    comm: str
    start: int  # starttime in ticks: (pid, start) names a process across pid reuse
    cmdline: str
    cgroup: str = ""

    @property
    def key(self):
        return (self.pid, self.start)

    @property
    def slot(self) -> Optional[int]:
        if self.uid >= SANDBOX_UID_MIN:
            return (self.uid - SANDBOX_UID_MIN) // UID_RANGE
        m = re.search(r"/cordon/slot-(\d+)", self.cgroup)
        return int(m.group(1)) if m else None

    def __str__(self):
        return (f"pid {self.pid} (ppid {self.ppid}, uid {self.uid}, state {self.state}) "
                f"{self.cmdline or '[' + self.comm + ']'}")


def proc_info(pid) -> Optional[Proc]:
    try:
        status = read(f"/proc/{pid}/status")
        stat = read(f"/proc/{pid}/stat")
        cmdline = read(f"/proc/{pid}/cmdline", "").replace("\0", " ").strip()
        cgroup = read(f"/proc/{pid}/cgroup", "")
    except OSError:
        return None
    fields = {}
    for line in status.splitlines():
        k, _, v = line.partition(":")
        fields[k] = v.strip()
    # stat: "pid (comm) state ppid …"; comm may hold spaces and parentheses.
    rest = stat[stat.rfind(")") + 2:].split()
    return Proc(
        pid=int(pid),
        ppid=int(fields.get("PPid", "0")),
        uid=int(fields.get("Uid", "0").split()[0]),
        state=fields.get("State", "?")[:1],
        comm=fields.get("Name", ""),
        start=int(rest[19]),
        cmdline=cmdline,
        cgroup=cgroup,
    )


def all_procs():
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            p = proc_info(d)
            if p:
                out.append(p)
    return out


def sandbox_procs(procs=None):
    """Processes running as a sandbox uid. Zombies whose parent is the host's
    init are left out: they hold no resources, and reaping them is init's job,
    not cordon's (this host's init reaps with a delay of a second or two)."""
    procs = all_procs() if procs is None else procs
    return [p for p in procs if p.uid >= SANDBOX_UID_MIN and not (p.state == "Z" and p.ppid == 1)]


def find_sandbox_proc(predicate, timeout=10.0):
    """Wait for a sandbox-uid process matching predicate(Proc); return it."""
    def look():
        for p in sandbox_procs():
            if p.state != "Z" and predicate(p):
                return p
        return None
    return wait_for(look, timeout=timeout, what="a matching sandbox process on the host")


def descendants(pid, procs=None):
    procs = all_procs() if procs is None else procs
    children = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p)
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c.pid)
    return out


# ---------------------------------------------------------------- host state


def mount_table():
    """Host mounts as a set of (mount point, fs type)."""
    out = set()
    for line in read("/proc/self/mountinfo").splitlines():
        left, _, right = line.partition(" - ")
        f = left.split()
        out.add((f[4], right.split()[0]))
    return out


def cgroup_dirs():
    """Every directory below a "cordon" cgroup parent, in every hierarchy."""
    out = set()
    parents = [os.path.join(CGROUP_ROOT, "cordon")]
    try:
        parents += [os.path.join(CGROUP_ROOT, h, "cordon") for h in os.listdir(CGROUP_ROOT)]
    except OSError:
        pass
    for parent in parents:
        if not os.path.isdir(parent):
            continue
        for dirpath, dirnames, _ in os.walk(parent):
            out.update(os.path.join(dirpath, d) for d in dirnames)
    return out


def cgroup_slot(path) -> Optional[int]:
    m = re.search(r"/cordon/slot-(\d+)(/|$)", path)
    return int(m.group(1)) if m else None


def net_links():
    p = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True)
    out = set()
    for line in p.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            out.add(parts[1].strip().split("@")[0])
    return out


def nft_tables():
    """cordon's nftables tables (the egress layer's, one per cordond)."""
    try:
        out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return set()
    # cordon_failclosed is host-wide and kept for good on purpose (src/net/nft.h)
    return {ln.strip() for ln in out.splitlines() if " cordon" in ln and "cordon_failclosed" not in ln and "cordon_guard" not in ln}


def named_netns():
    try:
        return set(os.listdir("/run/netns"))
    except OSError:
        return set()


LOOP_GET_STATUS64 = 0x4C05
LOOP_INFO64_SIZE = 232  # struct loop_info64; lo_file_name[64] at offset 56


# A script (python3 -c FILL PATH) that writes PATH until the kernel refuses; prints the errno's name and
# how much got written (MiB).
FILL = """
import errno, sys
n = 0
try:
    with open(sys.argv[1], "wb") as f:
        while True:
            f.write(b"x" * (1 << 20)); f.flush(); n += 1
except OSError as e:
    print(errno.errorcode[e.errno], n)
"""


def owner_of(daemon):
    """The directory of cordond's writable layer pool that is daemon's (layer-pool.c owner_name): the
    FNV-1a hash of its sandbox directory's real path."""
    h = 1469598103934665603
    for c in os.path.realpath(os.path.join(os.path.dirname(daemon.socket), "sandboxes")).encode():
        h = ((h ^ c) * 1099511628211) & (2**64 - 1)
    return f"sandboxes-{h:016x}"


class PoolView:
    """The pool mounted where the test can read it (the same superblock as cordond's detached mount),
    and unmounted again: its loop device is the one bound to <state>/pool.btrfs."""

    def __init__(self, daemon):
        self.image = os.path.join(daemon.state, "pool.btrfs")

    def __enter__(self):
        out = subprocess.run(["losetup", "-j", self.image], capture_output=True, text=True, check=True).stdout
        assert out, "no loop device is bound to the pool"
        self.dir = tempfile.mkdtemp(prefix="cordon-pool-view-")
        subprocess.run(["mount", "-t", "btrfs", out.split(":")[0], self.dir], check=True)
        return self

    def layers(self, owner):
        d = os.path.join(self.dir, owner)
        return sorted(n for n in os.listdir(d) if os.stat(os.path.join(d, n)).st_ino == 256) if os.path.isdir(d) else []

    def __exit__(self, *exc):
        subprocess.run(["umount", self.dir], check=True)
        os.rmdir(self.dir)


def writable_loops():
    """The container tier's writable layers (src/tiers/container/writable.c): attached loop
    devices named "cordon-slot-N" → N, or "cordon-stock-P" (made ahead by cordond P, used by a
    sandbox of it or still in its stock) → ("stock", P). Each goes with its sandbox's mount
    namespace, or with cordond's stock."""
    out = {}
    try:
        names = [n for n in os.listdir("/sys/block") if n.startswith("loop")]
    except OSError:
        return out
    for name in names:
        if not os.path.exists(f"/sys/block/{name}/loop/backing_file"):
            continue  # not bound to a file
        try:
            fd = os.open(f"/dev/{name}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            info = fcntl.ioctl(fd, LOOP_GET_STATUS64, bytes(LOOP_INFO64_SIZE))
        except OSError:
            continue
        finally:
            os.close(fd)
        m = re.fullmatch(rb"cordon-(slot|stock|store)-(\d+)", info[56:120].split(b"\0")[0])
        if m:
            out[name] = int(m.group(2)) if m.group(1) == b"slot" else (m.group(1).decode(), int(m.group(2)))
    return out


def writable_layers():
    """writable_loops() as (device, value, backing file) triples. The kernel hands a freed loop
    device to the next layer made anywhere (cordond's stock refill, a test beside), so "this layer
    is gone" is judged by the triple, not by the device's name."""
    out = set()
    for name, v in writable_loops().items():
        try:
            with open(f"/sys/block/{name}/loop/backing_file") as f:
                out.add((name, v, f.read().strip()))
        except OSError:
            continue  # detached meanwhile
    return out

def layers_of(pid):
    """The writable_layers() mounted in the mount namespace of pid or of one of its descendants:
    this run's own layer, not one that a test beside made meanwhile (the other pass's cordond
    refilling its stock, another run's slot layer) — a "what is new" diff would count those too."""
    devs = set()
    for p in [pid] + [c.pid for c in descendants(pid)]:
        # "": a process that exited, or is between namespaces (EINVAL: CI saw one mid-setup); the
        # caller polls again.
        for line in read(f"/proc/{p}/mountinfo", "").splitlines():
            right = line.partition(" - ")[2].split()
            if len(right) > 1 and right[1].startswith("/dev/loop"):
                devs.add(right[1][len("/dev/"):])
    return {t for t in writable_layers() if t[0] in devs}


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except OSError:
        return True


SLOT_LOCK = re.compile(r"/slots/(\d+)$")
HELD_FILE = re.compile(r"/slots/held-(\d+)$")
HELD_PER_FILE = 128  # confine/slot.c
HELD_BYTE = re.compile(r"^lock:\s+\d+: OFDLCK\s+\S+\s+WRITE\s+\S+\s+\S+\s+(\d+)\s+(\d+)$", re.M)


def slot_holders(procs):
    """slot number → processes holding a slot lock file (<run dir>/slots/N)
    open, or its byte of <run dir>/slots/held-<slot // 128> locked (cordond's
    hold of the slots its sandboxes' inits lock: confine/slot.h cdn_slot_hold). Any run
    dir counts: slot numbers name one host-wide uid range and cgroup whichever
    run dir a cordon was started with."""
    out = {}
    for p in procs:
        try:
            fds = os.listdir(f"/proc/{p.pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{p.pid}/fd/{fd}")
                m = SLOT_LOCK.search(link)
                h = None if m else HELD_FILE.search(link)
                held = HELD_BYTE.findall(open(f"/proc/{p.pid}/fdinfo/{fd}").read()) if h else []
            except OSError:
                continue
            # one lock line may cover several slots: the kernel merges a holder's adjacent bytes
            base = int(h.group(1)) * HELD_PER_FILE if h else 0
            slots = [int(m.group(1))] if m else [base + s for a, b in held for s in range(int(a), int(b) + 1)]
            for s in slots:
                out.setdefault(s, []).append(p)
    return out


# What `cordon vm prepare` made (install.sh runs it): every cordon and cordond of the tests uses it,
# whatever state directory a test gives them, so that no test ever prepares (downloads) anything.
VM_DIR = os.environ.setdefault(
    "CORDON_VM_DIR", os.path.join(os.environ.get("CORDON_STATE_DIR", "/var/lib/cordon"), "vm"))


# Whether the VM tiers can run here, and the guest's release: the product's answer (testenv.py).
from testenv import guest_release, need, need_vm, vm_ready  # noqa: E402,F401


def vm_run_files():
    """What is in the full VMs' run directories (<vm dir>/run/ID and its files)."""
    out = set()
    for d, dirs, files in os.walk(os.path.join(VM_DIR, "run")):
        out.update(os.path.join(d, n) for n in dirs + files)
    return out


def is_cordon(p: Proc):
    # cordon-full: the glibc build that the lean static cordon hands --json,
    # --spec and other library work to (src/cli/cli.h)
    return p.comm in ("cordon", "cordon-full", "cordond")


@dataclass
class HostState:
    mounts: set = field(default_factory=set)
    cgroups: set = field(default_factory=set)
    procs: dict = field(default_factory=dict)  # key → Proc, sandbox uids only
    orphans: dict = field(default_factory=dict)  # key → Proc, cordon processes whose parent died
    links: set = field(default_factory=set)
    netns: set = field(default_factory=set)
    nft: set = field(default_factory=set)
    live_slots: set = field(default_factory=set)  # slots with a live, non-orphan supervisor
    qemus: dict = field(default_factory=dict)  # key → Proc: the VM tiers' guests
    vm_runs: set = field(default_factory=set)  # <vm dir>/run/ID/…: a full VM's snapshot of its disk
    loops: dict = field(default_factory=dict)  # /dev/loopN → slot: container writable layers

    @classmethod
    def snapshot(cls):
        procs = all_procs()
        holders = slot_holders([p for p in procs if is_cordon(p)])
        live = {s for s, hs in holders.items() if any(h.ppid != 1 and h.state != "Z" for h in hs)}
        return cls(
            mounts=mount_table(),
            cgroups=cgroup_dirs(),
            procs={p.key: p for p in sandbox_procs(procs)},
            orphans={p.key: p for p in procs if is_cordon(p) and p.ppid == 1 and p.state != "Z"},
            links=net_links(),
            netns=named_netns(),
            nft=nft_tables(),
            live_slots=live,
            qemus={p.key: p for p in procs if p.comm.startswith("qemu-system") and p.state != "Z"},
            vm_runs=vm_run_files(),
            loops=writable_loops(),
        )

    def leaks_since(self, before: "HostState"):
        """What appeared since `before` and is not owned by a live sandbox:
        category → sorted list of descriptions. Empty when clean."""
        out = {}
        mounts = self.mounts - before.mounts
        nsfs = {m for m in mounts if m[1] == "nsfs"}
        if mounts - nsfs:
            out["mounts"] = sorted(f"{mp} ({t})" for mp, t in mounts - nsfs)
        if nsfs:
            out["nsfs mounts"] = sorted(mp for mp, _ in nsfs)
        cg = [c for c in self.cgroups - before.cgroups if cgroup_slot(c) not in self.live_slots]
        if cg:
            out["cgroups"] = sorted(cg)
        procs = [p for k, p in self.procs.items() if k not in before.procs and p.slot not in self.live_slots]
        if procs:
            out["sandbox processes"] = sorted(str(p) for p in procs)
        orphans = [p for k, p in self.orphans.items() if k not in before.orphans]
        if orphans:
            out["orphaned cordon processes"] = sorted(str(p) for p in orphans)
        # cdnt-*: the fake internet's (fakenet.py), which a module of the other pass may hold
        links = {ln for ln in self.links - before.links if not ln.startswith("cdnt-")}
        if links:
            out["net links"] = sorted(links)
        if self.netns - before.netns:
            out["named netns"] = sorted(self.netns - before.netns)
        if self.nft - before.nft:
            out["nftables tables"] = sorted(self.nft - before.nft)
        qemus = [p for k, p in self.qemus.items() if k not in before.qemus]
        if qemus:
            out["QEMU processes"] = sorted(str(p) for p in qemus)
        loops = [f"/dev/{n} (slot {s})" for n, s in self.loops.items()
                 if isinstance(s, int) and before.loops.get(n) != s and s not in self.live_slots]
        # A layer made ahead carries its maker's name, not its slot: one whose cordond is gone
        # is a leak unless a live sandbox may hold it (a live slot with no layer of its own name).
        stock = [f"/dev/{n} (made ahead by cordond {s[1]})" for n, s in self.loops.items()
                 if not isinstance(s, int) and s[0] == "stock" and before.loops.get(n) != s and not pid_alive(s[1])]
        # The checkpoint store (tiers/container/layer-store.c) of a cordond that is gone stays only
        # while a sandbox's layer lives in it.
        stores = [f"/dev/{n} (checkpoint store of cordond {s[1]})" for n, s in self.loops.items()
                  if not isinstance(s, int) and s[0] == "store" and before.loops.get(n) != s
                  and not pid_alive(s[1]) and not self.live_slots]
        unnamed = {s for s in self.live_slots} - {s for s in self.loops.values() if isinstance(s, int)}
        loops += sorted(stock)[:max(0, len(stock) - len(unnamed))] + sorted(stores)
        if loops:
            out["loop devices"] = sorted(loops)
        if self.vm_runs - before.vm_runs:
            out["VM run files"] = sorted(self.vm_runs - before.vm_runs)
        return out


def check_no_leaks(before: HostState, timeout=3.0):
    """Poll until nothing leaked since `before`; return the leaks still there
    at the deadline (empty dict when clean)."""
    deadline = time.monotonic() + timeout
    while True:
        leaks = HostState.snapshot().leaks_since(before)
        if not leaks or time.monotonic() >= deadline:
            return leaks
        time.sleep(0.02)


def format_leaks(leaks):
    return "\n".join(f"  {k}:\n" + "\n".join(f"    {v}" for v in vs) for k, vs in leaks.items())


# ---------------------------------------------------------------- images


def build_busybox_image(dest, busybox="/bin/busybox"):
    """A minimal root filesystem: one static busybox plus its applet links."""
    os.makedirs(os.path.join(dest, "bin"), exist_ok=True)
    for d in ("etc", "tmp", "root", "proc", "dev"):
        os.makedirs(os.path.join(dest, d), exist_ok=True)
    target = os.path.join(dest, "bin", "busybox")
    with open(busybox, "rb") as src, open(target, "wb") as dst:
        dst.write(src.read())
    os.chmod(target, 0o755)
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True).stdout.split()
    for a in applets:
        link = os.path.join(dest, "bin", a)
        if a != "busybox" and not os.path.lexists(link):
            os.symlink("busybox", link)
    with open(os.path.join(dest, "etc", "passwd"), "w") as f:
        f.write("root:x:0:0:root:/root:/bin/sh\n")
    with open(os.path.join(dest, "etc", "group"), "w") as f:
        f.write("root:x:0:\n")
    with open(os.path.join(dest, "etc", "image-marker"), "w") as f:
        f.write("busybox-image\n")
    return dest


def is_static_elf(path):
    """True for a 64-bit little-endian ELF without a PT_INTERP header."""
    with open(path, "rb") as f:
        data = f.read(1 << 16)
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return False
    phoff = int.from_bytes(data[0x20:0x28], "little")
    phentsize = int.from_bytes(data[0x36:0x38], "little")
    phnum = int.from_bytes(data[0x38:0x3A], "little")
    for i in range(phnum):
        off = phoff + i * phentsize
        if int.from_bytes(data[off:off + 4], "little") == 3:  # PT_INTERP
            return False
    return True


# ---------------------------------------------------------------- cordond

CORDOND_BIN = os.environ.get("CORDOND_BIN") or os.path.join(os.path.dirname(CORDON_BIN), "cordond")
sys.path.insert(0, os.path.join(REPO, "python"))


class Daemon:
    """A cordond of our own on a temporary socket and sandbox directory,
    stopped (SIGTERM) by stop(). With keep=False (the default here) the stop
    ends its sandboxes; keep=True leaves them for the next Daemon on the same
    workdir, as a restart of the real service does. wrap: a command line that
    runs cordond (prlimit, setpriv …)."""

    def __init__(self, workdir, *args, keep=False, env=None, wrap=()):
        self.socket = os.path.join(workdir, "cordond.sock")
        self.log_path = os.path.join(workdir, "cordond.log")
        self.log = open(self.log_path, "wb")
        if os.path.exists(self.socket):
            os.unlink(self.socket)  # a killed predecessor's: its file stays behind
        # A sanitizer build keeps freed memory in quarantine (256 MB by
        # default), which would hide whether cordond's own memory is bounded.
        env = dict(os.environ, **(env or {}),
                   ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=16")
        argv = [CORDOND_BIN, "--config", "/dev/null", "--socket", self.socket,
                "--sandbox-dir", os.path.join(workdir, "sandboxes"), "--stop-sandboxes", "false" if keep else "true"]
        self.proc = subprocess.Popen([*wrap, *argv, *args],
                                     env=env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: os.path.exists(self.socket) or self.proc.poll() is not None, timeout=10,
                     what="cordond's socket")
        except AssertionError:
            self.proc.kill()  # never leave a daemon of ours behind
            self.proc.wait()
            raise
        if self.proc.poll() is not None:
            raise AssertionError(f"cordond exited {self.proc.returncode}:\n{self.output()}")
        from cordon import Endpoint
        self.endpoint = Endpoint(socket_path=self.socket, timeout=120)

    def output(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def http(self, method, path, body=None, headers=None):
        """Raw request: (status, parsed JSON or bytes). Never raises for an HTTP status."""
        import http.client
        import socket as socketmod

        class Conn(http.client.HTTPConnection):
            def connect(conn):
                conn.sock = socketmod.socket(socketmod.AF_UNIX, socketmod.SOCK_STREAM)
                conn.sock.settimeout(60)
                conn.sock.connect(self.socket)

        c = Conn("cordond")
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        c.close()
        try:
            return r.status, json.loads(data)
        except ValueError:
            return r.status, data

    def wait_stock_full(self, n=4, timeout=30):
        """Until cordond's writable layers made ahead (writable_stock, 4 by default; one fd each)
        number n. It fills them from its start and after creates pause, so a count of its fds is
        only comparable with the stock full on both sides."""
        wait_for(lambda: sum(v == ("stock", self.proc.pid) for v in writable_loops().values()) >= n,
                 timeout=timeout, what=f"cordond's stock of {n} writable layers")

    def kill9(self):
        """SIGKILL: a crash. The sandboxes stay."""
        self.proc.kill()
        self.proc.wait()
        self.log.close()

    def stop(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"cordond did not stop within {timeout}s:\n{self.output()}")
        self.log.close()
        return self.proc.returncode


def state_daemon(shared_dir, *args):
    """A Daemon with its own state directory (d.state) under shared_dir, stopped cleanly at the end:
    the body of a fixture (yield from state_daemon(...))."""
    state = os.path.join(shared_dir, "state")
    d = Daemon(shared_dir, "--state-dir", state, *args)
    d.state = state
    yield d
    assert d.stop() == 0, d.output()
