"""Signals to `cordon run`, its sudden death, and sandboxes side by side."""

import os
import signal
import subprocess
import threading
import time

import pytest

from cordonlib import (HostState, Running, check_no_leaks, descendants, find_sandbox_proc, format_leaks,
                       proc_info, run, sandbox_procs)

TRAP = "trap 'echo got-{name}; exit {code}' {name}; echo ready; sleep 100 & wait"


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 42), (signal.SIGINT, 43), (signal.SIGHUP, 44),
                                      (signal.SIGUSR1, 45)])
def test_signal_is_forwarded_to_the_command(sig, code):
    name = sig.name[3:]
    with Running(["--", "sh", "-c", TRAP.format(name=name, code=code)]) as s:
        assert s.proc.stdout.readline() == "ready\n"
        s.signal(sig)
        r = s.wait(timeout=10)
    assert r.code == code, r.stderr
    assert r.stdout == f"got-{name}\n"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_startup_is_not_lost(sig):
    # A signal that reaches `cordon run` while it is still creating the
    # sandbox must still end the command (or cordon, if nothing was started
    # yet) — not vanish and leave `sleep 30` running to the end.
    delays_ms = [0, 0.5, 1, 1.5, 2, 3, 4, 6, 8, 12]
    runs = []
    try:
        for d in delays_ms:  # each is signalled at its delay; all are waited for together below
            s = Running(["--", "sleep", "30"])
            time.sleep(d / 1000)
            s.signal(sig)
            runs.append((d, s))
        deadline = time.monotonic() + 5
        outcomes = []
        for d, s in runs:
            try:
                code = s.proc.wait(timeout=max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                code = "still running 5s later"
            outcomes.append((d, code))
    finally:
        for _, s in runs:
            s.kill()
    lost = [(d, c) for d, c in outcomes if c not in (128 + sig, -sig)]
    assert not lost, f"{sig.name} at these delays (ms) did not end the run: {lost}; all: {outcomes}"


def test_untrapped_sigterm_kills_the_command():
    with Running(["--json", "--", "sh", "-c", "echo ready; exec sleep 100"]) as s:
        assert s.proc.stdout.readline() == "ready\n"
        s.signal(signal.SIGTERM)
        r = s.wait(timeout=10)
    assert r.code == 128 + signal.SIGTERM
    assert r.record["signal"] == signal.SIGTERM


@pytest.mark.serial  # checks the host for leaks inside the test: no other pass may run
def test_sigkill_of_cordon_run_cleans_up_within_3s(no_leaks):
    # A command that ignores everything it can, with children of its own.
    cmd = "trap '' TERM INT HUP; sleep 1021.5 & sleep 1021.5 & echo ready; sleep 1021.5"
    with Running(["--", "sh", "-c", cmd]) as s:
        assert s.proc.stdout.readline() == "ready\n"
        victim = find_sandbox_proc(lambda p: p.cmdline == "sleep 1021.5")
        # While cordon run lives, its sandbox is visible on the host and owned (not a leak).
        live = HostState.snapshot()
        assert victim.key in live.procs and victim.slot in live.live_slots
        assert any(f"slot-{victim.slot}" in c for c in live.cgroups)
        os.kill(s.pid, signal.SIGKILL)
        s.proc.wait()
    t0 = time.monotonic()
    leaks = check_no_leaks(no_leaks, timeout=3.0)
    assert not leaks, f"{time.monotonic() - t0:.2f}s after SIGKILL:\n" + format_leaks(leaks)
    assert not [p for p in sandbox_procs() if p.cmdline == "sleep 1021.5"]


@pytest.mark.serial  # checks the host for leaks inside the test: no other pass may run
def test_sigkill_during_startup_cleans_up(no_leaks):
    # Kill at assorted moments of sandbox creation.
    for delay_ms in (0, 1, 2, 4, 8, 16):
        p = Running(["--", "sleep", "1022.5"])
        time.sleep(delay_ms / 1000)
        os.kill(p.pid, signal.SIGKILL)
        p.proc.wait()
        p.kill()
    leaks = check_no_leaks(no_leaks, timeout=3.0)
    assert not leaks, format_leaks(leaks)


def test_sandbox_processes_are_descendants_of_cordon_run():
    with Running(["--", "sh", "-c", "sleep 1023.5 & echo ready; wait"]) as s:
        assert s.proc.stdout.readline() == "ready\n"
        find_sandbox_proc(lambda p: p.cmdline == "sleep 1023.5")
        tree = descendants(s.pid)
        sandbox = [p for p in tree if p.uid >= 1 << 30]
        assert any(p.comm == "cordon-init" for p in sandbox)
        assert any(p.cmdline == "sleep 1023.5" for p in sandbox)


def test_closed_stdout_does_not_hang():
    # The reader goes away; the command gets EPIPE/SIGPIPE and cordon still ends.
    with Running(["--", "sh", "-c", "yes"]) as s:
        s.proc.stdout.read(1000)
        s.proc.stdout.close()
        code = s.proc.wait(timeout=10)
    assert code in (0, 1, 128 + signal.SIGPIPE), code


def test_concurrent_sandboxes_are_isolated_from_each_other():
    n = 6
    results = [None] * n

    def one(i):
        results[i] = run(["--json", "--hostname", f"h{i}", "--", "sh", "-c",
                          f"echo {i} > /tmp/mine; sleep 0.3; cat /tmp/mine; hostname; cat /proc/self/uid_map"])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    bases = set()
    for i, r in enumerate(results):
        assert r.code == 0, r.stderr
        mine, host, uid_map = r.stdout.splitlines()
        assert (mine, host) == (str(i), f"h{i}")
        bases.add(int(uid_map.split()[1]))
    assert len(bases) == n
    assert len({r.record["id"] for r in results}) == n


def test_sandbox_cannot_see_or_signal_another():
    with Running(["--", "sleep", "1024.5"]):
        victim = find_sandbox_proc(lambda p: p.cmdline == "sleep 1024.5")
        r = run(["--", "sh", "-c", f"test -e /proc/{victim.pid}/cmdline && cat /proc/{victim.pid}/cmdline; "
                 f"kill -9 {victim.pid}; echo rc=$?"])
        assert "sleep" not in r.stdout
        assert r.stdout.strip().splitlines()[-1] != "rc=0", r.stdout
        again = proc_info(victim.pid)
        assert again is not None and again.key == victim.key and again.state != "Z"
