"""cordond restarts (DESIGN §6, issue 3 point 4): sandboxes outlive a stopped
or killed daemon, and the next one adopts them from its sandbox directory or,
when it cannot, cleans them up. The autouse leak check runs after each test."""

import json
import os
import signal
import time

import pytest

from cordonlib import Daemon, all_procs, cgroup_dirs, cgroup_slot, sandbox_procs, slot_holders, wait_for

import cordon
from cordon import Sandbox

# It counts every sandbox init and QEMU on the host: it has the host to itself (tests/suitelock.py).
pytestmark = pytest.mark.serial

LEAK_TIMEOUT = 5.0


def inits(tier="container"):
    """The sandboxes' inits: cordon-init, or for a VM the QEMU its guest runs in."""
    if tier == "container":
        return [p for p in sandbox_procs() if p.comm == "cordon-init"]
    return [p for p in all_procs() if p.comm == "qemu-system-x86" and p.state != "Z"]


@pytest.fixture
def workdir(shared_dir):
    yield shared_dir
    # whatever a failing test left running: a last daemon that ends it all
    if os.path.isdir(os.path.join(shared_dir, "sandboxes")) and any(
            n.endswith(".json") for n in os.listdir(os.path.join(shared_dir, "sandboxes"))):
        Daemon(shared_dir).stop()


@pytest.mark.parametrize("how", ["stop", "kill -9"])
def test_sandboxes_survive_a_restart_and_are_adopted(workdir, how, tier):
    d = Daemon(workdir, keep=True)
    sb = Sandbox.create(endpoint=d.endpoint, labels={"job": "restart"}, tier=tier)
    sb.files.write("/workspace/state.txt", b"before the restart")
    assert sb.exec("sleep 300 > /dev/null 2>&1 &").exit_code == 0  # a background process of the agent's
    init_pid = inits(tier)[0].pid
    if how == "stop":
        assert d.stop() == 0
    else:
        d.kill9()
    assert [p.pid for p in inits(tier)] == [init_pid]  # still there, nobody connected

    d2 = Daemon(workdir)
    try:
        assert "adopted 1 sandboxes" in d2.output()
        again = Sandbox.connect(sb.id, endpoint=d2.endpoint)
        info = again.info()
        assert info["state"] == "running" and info["labels"] == {"job": "restart"}
        assert again.files.read("/workspace/state.txt") == b"before the restart"
        r = again.exec("echo after; pgrep -x sleep >/dev/null && echo sleeper-alive")
        assert r.stdout == "after\nsleeper-alive\n", r.stderr
        assert "adopted" in [e["type"] for e in again.events()]
        again.kill()
    finally:
        assert d2.stop() == 0


def test_execs_after_a_restart_do_not_clash_with_running_ones(workdir, tier):
    # The killed daemon's exec is still running in the sandbox on its
    # channel. A container's init sees a new connection and forgets the old
    # channels; a VM guest may not see the hang-up before the new host comes
    # (CI once: "exec channel: File exists"), so cordond numbers its channels
    # from a random start.
    import threading
    d = Daemon(workdir, keep=True)
    sb = Sandbox.create(endpoint=d.endpoint, tier=tier)
    t = threading.Thread(target=lambda: _ignore(lambda: sb.exec(["sleep", "5"])))
    t.start()
    wait_for(lambda: sb.exec(["pgrep", "-x", "sleep"]).exit_code == 0, timeout=10, what="sleep running")
    d.kill9()
    t.join()
    d2 = Daemon(workdir)
    try:
        again = Sandbox.connect(sb.id, endpoint=d2.endpoint)
        assert [again.exec(f"echo {i}").stdout for i in range(3)] == ["0\n", "1\n", "2\n"]
        again.kill()
    finally:
        assert d2.stop() == 0


def _ignore(fn):
    try:
        fn()
    except Exception:
        pass


def test_sandbox_that_died_while_no_daemon_ran_is_cleaned_up(workdir, tier):
    d = Daemon(workdir, keep=True)
    sb = Sandbox.create(endpoint=d.endpoint, tier=tier)
    d.kill9()
    os.kill(inits(tier)[0].pid, signal.SIGKILL)
    wait_for(lambda: not inits(tier), what="init to die")
    d2 = Daemon(workdir)
    try:
        assert "could not be adopted" in d2.output()
        with pytest.raises(cordon.NotFound):
            Sandbox.connect(sb.id, endpoint=d2.endpoint)
        assert os.listdir(os.path.join(workdir, "sandboxes")) == []
    finally:
        assert d2.stop() == 0
    # the autouse leak check: its cgroup is gone too


def test_a_sandbox_adopted_half_way_is_cleaned_up_and_its_slot_freed(workdir):
    # adopt() takes init's slot lock and holds the slot's byte of <run>/slots/held-K (confine/slot.h);
    # then the connection to init's socket fails. Seen failing when that path closed only the lock's
    # fd: the byte stayed cordond's, so its sweep found the slot taken and left the cgroup behind
    # (and no other sandbox could have the slot while that cordond ran).
    d = Daemon(workdir, keep=True)
    sb = Sandbox.create(endpoint=d.endpoint)
    sdir = os.path.join(workdir, "sandboxes")
    slot = json.load(open(os.path.join(sdir, f"{sb.id}.json")))["slot"]
    d.kill9()
    os.unlink(os.path.join(sdir, f"{sb.id}.sock"))
    d2 = Daemon(workdir)
    try:
        assert "could not be adopted" in d2.output()
        wait_for(lambda: not inits(), what="init's end")
        assert slot not in slot_holders([p for p in all_procs() if p.pid == d2.proc.pid])
        assert not [c for c in cgroup_dirs() if cgroup_slot(c) == slot]
    finally:
        assert d2.stop() == 0


def test_damaged_record_is_dropped(workdir):
    sdir = os.path.join(workdir, "sandboxes")
    os.makedirs(sdir, mode=0o700, exist_ok=True)
    with open(os.path.join(sdir, "0123456789ab.json"), "w") as f:
        f.write('{"id": "0123456789ab", "slot": "x"')
    d = Daemon(workdir)
    try:
        assert d.endpoint.json("GET", "/v1/health")["status"] == "ok"
        assert not os.path.exists(os.path.join(sdir, "0123456789ab.json"))
    finally:
        assert d.stop() == 0


def test_lifetime_counts_across_a_restart(workdir, tier):
    d = Daemon(workdir, keep=True)
    t0 = time.monotonic()
    sb = Sandbox.create(endpoint=d.endpoint, timeout_s=3, tier=tier)
    assert d.stop() == 0
    d2 = Daemon(workdir)
    try:
        info = wait_for(lambda: (lambda i: "ended_at" in i and i)(Sandbox.connect(sb.id, endpoint=d2.endpoint).info()),
                        timeout=15, what="the lifetime to end the adopted sandbox")
        assert 2.5 < time.monotonic() - t0 < 12
        assert info["exit_reason"] == "lifetime (limits.timeout_s) reached", info
    finally:
        assert d2.stop() == 0
