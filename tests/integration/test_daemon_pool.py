"""Warm pools (issue 3 point 3): cordond keeps sandboxes ready for its
configured specs; a create of the same shape is a hand-over, anything else is
built on demand. The autouse leak check runs after each test."""

import json
import os
import time

import pytest

from cordonlib import Daemon, sandbox_procs, wait_for

from cordon import Sandbox

LEAK_TIMEOUT = 5.0

# It counts every sandbox init on the host: it has the host to itself (tests/suitelock.py).
pytestmark = pytest.mark.serial


def pool_size(d):
    _, text = d.http("GET", "/metrics")
    line = next(x for x in text.decode().splitlines() if x.startswith("cordon_pool_size "))
    return int(line.split()[1])


def inits():
    return [p for p in sandbox_procs() if p.comm == "cordon-init"]


def test_pool_fills_hands_over_and_refills(shared_dir):
    d = Daemon(shared_dir, "--pool", "3")
    try:
        wait_for(lambda: pool_size(d) == 3, what="the pool to fill")
        assert len(inits()) == 3
        assert d.endpoint.json("GET", "/v1/sandboxes")["sandboxes"] == []  # pooled ones are not listed
        t = time.monotonic()
        sb = Sandbox.create(endpoint=d.endpoint, labels={"job": "p"}, env={"GREETING": "hi"}, timeout_s=30)
        handover_s = time.monotonic() - t
        types = [e["type"] for e in sb.events()]
        assert "handed_over" in types, types
        info = sb.info()
        assert info["labels"] == {"job": "p"} and info["spec"]["limits"]["timeout_s"] == 30
        assert sb.exec("echo $GREETING").stdout == "hi\n"
        wait_for(lambda: pool_size(d) == 3, what="the pool to refill")
        assert len(inits()) == 4
        # another shape is built on demand
        other = Sandbox.create(endpoint=d.endpoint, memory_mb=128)
        assert "handed_over" not in [e["type"] for e in other.events()]
        assert other.exec("true").exit_code == 0
        sb.kill()
        other.kill()
        assert handover_s < 5
    finally:
        assert d.stop() == 0  # the pool is emptied; the leak check sees to the rest


def test_pool_with_a_spec_file(shared_dir):
    spec = os.path.join(shared_dir, "pool.json")
    with open(spec, "w") as f:
        json.dump({"limits": {"memory_mb": 256, "pids": 64}, "hostname": "pooled"}, f)
    d = Daemon(shared_dir, "--pool", f"2:{spec}")
    try:
        wait_for(lambda: pool_size(d) == 2, what="the pool to fill")
        with Sandbox.create(endpoint=d.endpoint, memory_mb=256, pids=64, hostname="pooled",
                            labels={"x": "1"}) as sb:
            assert "handed_over" in [e["type"] for e in sb.events()]
            assert sb.exec("hostname").stdout == "pooled\n"
    finally:
        assert d.stop() == 0


def test_bad_pool_spec_is_refused_at_start(shared_dir):
    spec = os.path.join(shared_dir, "bad.json")
    with open(spec, "w") as f:
        f.write('{"limits": {"memory_mb": 1}}')
    import subprocess
    from cordonlib import CORDOND_BIN
    p = subprocess.run([CORDOND_BIN, "--config", "/dev/null", "--socket", os.path.join(shared_dir, "s.sock"),
                        "--pool", f"2:{spec}"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "memory_mb" in p.stderr, p.stderr
    p = subprocess.run([CORDOND_BIN, "--config", "/dev/null", "--socket", os.path.join(shared_dir, "s.sock"),
                        "--pool", "many"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "expected SIZE" in p.stderr, p.stderr


def test_pooled_sandboxes_are_not_adopted_after_a_restart(shared_dir):
    d = Daemon(shared_dir, "--pool", "2", keep=True)
    wait_for(lambda: pool_size(d) == 2, what="the pool to fill")
    sb = Sandbox.create(endpoint=d.endpoint)  # handed over: a user's sandbox now
    d.kill9()
    d2 = Daemon(shared_dir)
    try:
        assert "adopted 1 sandboxes" in d2.output()
        assert [s.id for s in Sandbox.list(endpoint=d2.endpoint)] == [sb.id]
        wait_for(lambda: len(inits()) == 1, what="the old pool's sandboxes to be ended: " + d2.output())
    finally:
        assert d2.stop() == 0
