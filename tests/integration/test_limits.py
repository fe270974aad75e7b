"""Resource limits (DESIGN §2 "limits"): timeout, memory, pids, disk, CPU,
rlimits, and the cgroup knobs cordon writes on the host. The tests taking
`tier` run once per tier: in a microvm the guest's init applies the same
limits to its commands (a cgroup of its own for pids and memory, one tmpfs of
--disk for the writable directories, the rlimits), and reports OOM kills and
pids hits to the host."""

import os
import re

import pytest

from cordonlib import (CGROUP_ROOT, EXIT_TIMEOUT, HostState, Running, find_sandbox_proc, read, run,
                       sandbox_procs, wait_for)

V2 = os.path.exists(os.path.join(CGROUP_ROOT, "cgroup.controllers"))

# ---------------------------------------------------------------- timeout


def test_timeout_exits_124_and_kills_the_whole_sandbox():
    # A background child that ignores SIGTERM and SIGHUP must go too.
    r = run(["--timeout", "500ms", "--json", "--", "sh", "-c",
             "trap '' TERM HUP; sleep 1000 & echo started; sleep 1000"], timeout=30)
    assert r.code == EXIT_TIMEOUT, r.stderr
    assert r.stdout == "started\n"
    rec = r.record
    assert rec["timed_out"] is True
    assert rec["exit_code"] == EXIT_TIMEOUT
    assert 450 <= rec["wall_ms"] < 5000, rec["wall_ms"]
    # No "sleep 1000" survives anywhere on the host (the autouse check then
    # confirms that no sandbox process, cgroup or mount of any kind remains).
    wait_for(lambda: not [p for p in sandbox_procs() if p.cmdline == "sleep 1000"],
             timeout=3, what="the sandbox's sleep 1000 to be gone")


def test_timeout_not_reached(tier):
    r = run(["--tier", tier, "--timeout", "30s", "--json", "--", "sh", "-c", "exit 7"])
    assert r.code == 7 and r.record["timed_out"] is False


@pytest.mark.parametrize("spelling,ms", [("1s", 1000), ("800ms", 800)])
def test_timeout_spellings(spelling, ms):
    r = run(["--timeout", spelling, "--json", "--", "sleep", "30"], timeout=30)
    assert r.code == EXIT_TIMEOUT
    assert ms * 0.9 <= r.record["wall_ms"] < ms + 3000


def test_timeout_while_output_is_streaming():
    r = run(["--timeout", "300ms", "--", "sh", "-c", "while :; do echo spam; done"], timeout=30)
    assert r.code == EXIT_TIMEOUT
    assert r.stdout.startswith("spam\n")


# ---------------------------------------------------------------- memory


def test_oom_kill_of_the_command_is_137_and_recorded(tier):
    r = run(["--tier", tier, "--memory", "64M", "--json", "--", "python3", "-c",
             "x = bytearray(300 << 20); x[::4096] = b'x' * len(x[::4096]); print('survived')"], timeout=120)
    assert r.code == 137, r.stderr
    assert "survived" not in r.stdout
    rec = r.record
    assert rec["oom_killed"] is True
    assert rec["signal"] == 9
    assert rec["limits"]["memory_mb"] == 64
    assert rec["memory_peak_bytes"] <= 64 << 20
    assert rec["memory_peak_bytes"] > 32 << 20


def test_oom_kill_of_a_child_keeps_the_commands_status(tier):
    # `tail` buffers everything and is killed; the pipeline's status is wc's.
    r = run(["--tier", tier, "--memory", "64M", "--json", "--", "sh", "-c",
             "head -c 300M /dev/zero | tail | wc -c; echo after"], timeout=120)
    assert r.code == 0, r.stderr
    assert r.stdout.split() == ["0", "after"]
    assert r.record["oom_killed"] is True


def test_memory_under_limit_is_fine(tier):
    r = run(["--tier", tier, "--memory", "128M", "--json", "--", "python3", "-c",
             "x = bytearray(40 << 20); x[::4096] = b'x' * len(x[::4096]); print('ok')"], timeout=120)
    assert (r.code, r.stdout) == (0, "ok\n"), r.stderr
    assert r.record["oom_killed"] is False
    assert r.record["memory_peak_bytes"] >= 40 << 20


# ---------------------------------------------------------------- pids


def test_pids_limit_makes_fork_fail(tier):
    r = run(["--tier", tier, "--pids", "16", "--json", "--", "python3", "-c", """
import os, errno, time
kids, err = [], None
for i in range(64):
    try:
        pid = os.fork()
    except OSError as e:
        err = errno.errorcode[e.errno]; break
    if pid == 0:
        time.sleep(30); os._exit(0)
    kids.append(pid)
print(len(kids), err)
for k in kids:
    os.kill(k, 9)
"""], timeout=120)
    assert r.code == 0, r.stderr
    n, err = r.stdout.split()
    assert err == "EAGAIN"
    assert 8 <= int(n) < 16, n  # init and python count too
    assert r.record["pids_limit_hits"] >= 1


def test_pids_limit_shell_fork_loop(tier):
    r = run(["--tier", tier, "--pids", "16", "--", "sh", "-c", "for i in $(seq 40); do sleep 30 & done; wait"], timeout=120)
    assert r.code != 0
    assert "fork" in r.stderr.lower() or "resource temporarily unavailable" in r.stderr.lower(), r.stderr


def test_thread_count_is_bounded_by_pids(tier):
    r = run(["--tier", tier, "--pids", "32", "--", "python3", "-c", """
import threading, time
ev = threading.Event(); n = 0
try:
    for i in range(200):
        threading.Thread(target=ev.wait, daemon=True).start(); n += 1
except RuntimeError:
    pass
print(n); ev.set()
"""], timeout=120)
    assert r.code == 0, r.stderr
    assert 10 <= int(r.stdout) < 32


# ---------------------------------------------------------------- disk


def test_disk_limit_write_fails_with_no_space(tier):
    r = run(["--tier", tier, "--disk", "8M", "--", "sh", "-c", "dd if=/dev/zero of=/workspace/big bs=1M count=20; echo rc=$?"],
            timeout=120)
    assert "No space left on device" in r.stderr, (r.code, r.stdout, r.stderr)
    assert r.stdout.strip().endswith("rc=1"), (r.code, r.stdout)
    assert r.code == 0


def test_disk_limit_shared_by_all_writable_dirs(tier):
    r = run(["--tier", tier, "--disk", "8M", "--", "sh", "-c",
             "dd if=/dev/zero of=/tmp/a bs=1M count=5 2>/dev/null && "
             "dd if=/dev/zero of=/workspace/b bs=1M count=5; echo rc=$?"], timeout=120)
    assert "No space left on device" in r.stderr, r.stderr
    assert r.stdout.strip() == "rc=1"


def test_disk_limit_does_not_leak_to_next_run(tier):
    r = run(["--tier", tier, "--disk", "8M", "--", "sh", "-c", "dd if=/dev/zero of=/tmp/a bs=1M count=6 2>/dev/null; echo $?"])
    assert r.stdout == "0\n", r.stderr
    r = run(["--tier", tier, "--disk", "8M", "--", "sh", "-c", "dd if=/dev/zero of=/tmp/a bs=1M count=6 2>/dev/null; echo $?"])
    assert r.stdout == "0\n", r.stderr


def test_workspace_reports_disk_size(tier):
    r = run(["--tier", tier, "--disk", "64M", "--", "df", "-k", "/workspace"])
    assert r.code == 0, r.stderr
    total_kb = int(r.stdout.splitlines()[-1].split()[1])
    assert 60 * 1024 <= total_kb <= 68 * 1024, r.stdout


# ---------------------------------------------------------------- rlimits


def test_rlimits(tier):
    r = run(["--tier", tier, "--disk", "64M", "--", "python3", "-c", """
import resource as r
for n in ("RLIMIT_NOFILE", "RLIMIT_CORE", "RLIMIT_FSIZE"):
    print(n, *r.getrlimit(getattr(r, n)))
"""])
    assert r.code == 0, r.stderr
    lim = {l.split()[0]: tuple(int(x) for x in l.split()[1:]) for l in r.stdout.splitlines()}
    assert lim["RLIMIT_NOFILE"] == (1024, 1024)
    assert lim["RLIMIT_CORE"] == (0, 0)
    assert lim["RLIMIT_FSIZE"][1] <= (64 << 20) * 2  # bounded, in the order of the disk limit


def test_nofile_flag_bounds_open_files(tier):
    r = run(["--tier", tier, "--nofile", "40", "--", "python3", "-c", """
import os, errno
fds = []
try:
    while True:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as e:
    print(errno.errorcode[e.errno], max(fds) < 40)
"""])
    assert (r.code, r.stdout) == (0, "EMFILE True\n"), r.stderr


# ---------------------------------------------------------------- cgroups


def cgroup_of(pid, controller):
    for line in read(f"/proc/{pid}/cgroup").splitlines():
        _, ctrls, path = line.split(":", 2)
        if (V2 and ctrls == "") or controller in ctrls.split(","):
            return path
    return None


def test_cgroup_limits_are_written_on_the_host():
    args = ["--cpus", "0.5", "--memory", "96M", "--pids", "40", "--", "sleep", "1011.5"]
    with Running(args):
        p = find_sandbox_proc(lambda p: p.cmdline == "sleep 1011.5")
        if V2:
            cg = cgroup_of(p.pid, "")
            assert re.fullmatch(r"/cordon/slot-\d+", cg), cg
            d = CGROUP_ROOT + cg
            assert read(f"{d}/memory.max").strip() == str(96 << 20)
            assert read(f"{d}/pids.max").strip() == "40"
            assert read(f"{d}/cpu.max").split() == ["50000", "100000"]
        else:
            paths = {c: cgroup_of(p.pid, c) for c in ("cpu", "memory", "pids")}
            for c, path in paths.items():
                assert path and re.fullmatch(r"/cordon/slot-\d+", path), (c, path)
            assert len(set(paths.values())) == 1
            mem = f"{CGROUP_ROOT}/memory{paths['memory']}"
            assert int(read(f"{mem}/memory.limit_in_bytes")) == 96 << 20
            assert int(read(f"{mem}/memory.memsw.limit_in_bytes", "-1")) in (-1, 96 << 20)
            assert read(f"{CGROUP_ROOT}/pids{paths['pids']}/pids.max").strip() == "40"
            cpu = f"{CGROUP_ROOT}/cpu{paths['cpu']}"
            quota = int(read(f"{cpu}/cpu.cfs_quota_us"))
            period = int(read(f"{cpu}/cpu.cfs_period_us"))
            assert quota / period == pytest.approx(0.5)
            # every process of the sandbox is in it, and nothing else is
            procs = {int(x) for x in read(f"{CGROUP_ROOT}/pids{paths['pids']}/cgroup.procs").split()}
            assert p.pid in procs
            assert all(int(read(f"/proc/{q}/status").split("Uid:")[1].split()[0]) >= 1 << 30
                       for q in procs if os.path.exists(f"/proc/{q}"))


def test_cgroup_default_limits():
    with Running(["--", "sleep", "1012.5"]):
        p = find_sandbox_proc(lambda p: p.cmdline == "sleep 1012.5")
        if V2:
            d = CGROUP_ROOT + cgroup_of(p.pid, "")
            assert read(f"{d}/memory.max").strip() == str(512 << 20)
            assert read(f"{d}/pids.max").strip() == "256"
        else:
            assert int(read(f"{CGROUP_ROOT}/memory{cgroup_of(p.pid, 'memory')}/memory.limit_in_bytes")) == 512 << 20
            assert read(f"{CGROUP_ROOT}/pids{cgroup_of(p.pid, 'pids')}/pids.max").strip() == "256"


@pytest.mark.serial  # checks the host for leaks inside the test: no other pass may run
def test_cgroup_is_removed_after_the_run(no_leaks):
    with Running(["--", "sleep", "1013.5"]) as s:
        p = find_sandbox_proc(lambda p: p.cmdline == "sleep 1013.5")
        slot_dir = f"{CGROUP_ROOT}/pids{cgroup_of(p.pid, 'pids')}" if not V2 else CGROUP_ROOT + cgroup_of(p.pid, "")
        assert os.path.isdir(slot_dir)
        s.kill()
    wait_for(lambda: not os.path.exists(slot_dir), timeout=3, what=f"{slot_dir} to be removed")
    assert not HostState.snapshot().leaks_since(no_leaks)


def test_cpu_quota_throttles():
    # Two busy threads under --cpus 0.25 get about a quarter of a CPU.
    r = run(["--cpus", "0.25", "--json", "--", "python3", "-c", """
import time, os, multiprocessing as mp
def spin():
    t = time.time()
    while time.time() - t < 1.0:
        pass
ps = [mp.Process(target=spin) for _ in range(2)]
[p.start() for p in ps]; [p.join() for p in ps]
"""], timeout=60)
    assert r.code == 0, r.stderr
    cpu_ms = r.record["cpu_user_ms"] + r.record["cpu_system_ms"]
    wall = r.record["wall_ms"]
    assert cpu_ms / wall < 0.45, (cpu_ms, wall)
