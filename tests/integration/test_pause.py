"""Pause and resume (issue 22: E2B's pause, cordon's own): a paused sandbox's processes are frozen
(its cgroup: cgroup.freeze on v2, a freezer cgroup on v1; a VM guest's QEMU with it) and its memory
kept; its lifetime and idle clocks stop; what would reach its processes is refused (409
sandbox_paused) until it is resumed; it can be deleted paused, leaving nothing behind.

That the freeze is tested, not assumed: with cdn_box_pause's freeze call removed, the counter below
goes on while "paused" and test_a_paused_sandbox_runs_nothing fails on its count."""

import time

import pytest

import cordon
from cordon import Sandbox

COUNTER = "while :; do echo x >> /tmp/count; sleep 0.05; done"


def lines(sb):
    return sb.files.read("/tmp/count").count(b"\n")


def test_a_paused_sandbox_runs_nothing_until_resumed(daemon, tier):
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        p = sb.start(COUNTER)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not sb.files.exists("/tmp/count") or lines(sb) < 3):
            time.sleep(0.1)
        before = lines(sb)
        info = sb.pause()
        assert info["paused"] is True and info["state"] == "running" and "expires_at" not in info, info
        time.sleep(2)
        for attempt in (lambda: sb.exec("true"), lambda: sb.files.read("/tmp/count"), lambda: sb.start("true")):
            with pytest.raises(cordon.SandboxNotRunning) as e:
                attempt()
            assert e.value.code == "sandbox_paused", e.value
        with pytest.raises(cordon.SandboxNotRunning) as e:
            sb.pause()
        assert e.value.code == "sandbox_paused"
        assert sb.info()["paused"] is True
        sb.resume()
        frozen = lines(sb) - before
        # 2 s running would have written ~20-40 lines; frozen, only those between the read and the
        # freeze, and between the thaw and the read
        assert frozen <= 6, frozen
        time.sleep(1.5)
        assert lines(sb) - before - frozen >= 5  # running again
        assert p.running
        with pytest.raises(cordon.SandboxNotRunning) as e:
            sb.resume()
        assert e.value.code == "sandbox_not_paused"
        types = [e["type"] for e in sb.events()]
        assert "paused" in types and "resumed" in types, types
        resumed = [e for e in sb.events() if e["type"] == "resumed"][0]
        assert 1900 <= resumed["paused_ms"] <= 10_000, resumed


def test_the_lifetime_stops_while_paused(daemon):
    sb = Sandbox.create(endpoint=daemon.endpoint, timeout_s=3)
    try:
        t0 = time.monotonic()
        sb.pause()
        time.sleep(3.5)
        assert sb.info()["state"] == "running"  # 3 s would have ended it
        info = sb.resume()
        assert info["state"] == "running" and info["expires_at"] > time.time() + 1.5, info
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and sb.info()["state"] == "running":
            time.sleep(0.2)
        assert sb.info()["state"] == "exited" and time.monotonic() - t0 >= 5.5
        # a resume with its own lifetime
        sb2 = Sandbox.create(endpoint=daemon.endpoint, timeout_s=2)
        sb2.pause()
        sb2.update(timeout_s=30)  # a paused sandbox's clocks change; it stays paused
        assert sb2.info()["paused"] is True
        time.sleep(2.5)
        info = sb2.resume()
        assert info["state"] == "running" and info["expires_at"] > time.time() + 25, info
        sb2.pause()
        info = sb2.resume(timeout_s=100)
        assert info["expires_at"] > time.time() + 95, info
        sb2.kill()
    finally:
        sb.kill()


def test_a_paused_sandbox_can_be_deleted(daemon, tier):
    """Its frozen processes die (a frozen v1 task takes SIGKILL only thawed): the delete ends it,
    and the leak check finds nothing of it (no process, cgroup, mount)."""
    sb = Sandbox.create(endpoint=daemon.endpoint, tier=tier)
    sb.start(COUNTER)
    sb.exec("sleep 0.3")
    sb.pause()
    sb.kill()
    with pytest.raises(cordon.NotFound):
        sb.info()


def test_pause_refuses_what_it_cannot(daemon):
    sb = Sandbox.create(endpoint=daemon.endpoint)
    sb.kill()
    with pytest.raises(cordon.NotFound):
        sb.pause()
    sb = Sandbox.create(endpoint=daemon.endpoint)
    st, body = daemon.http("POST", f"/v1/sandboxes/{sb.id}/resume", {"timeout_s": "x"})
    assert st == 400 and body["error"]["field"] == "timeout_s", body
    st, body = daemon.http("POST", f"/v1/sandboxes/{sb.id}/resume", {"other": 1})
    assert st == 400, body
    st, body = daemon.http("GET", f"/v1/sandboxes/{sb.id}/pause")
    assert st == 405, body
    sb.kill()


def test_a_sandbox_paused_when_cordond_went_runs_with_the_next(shared_dir):
    """A pause is that cordond's: the next one adopts the sandbox thawed (found by review: the thaw
    ran before the tier had set the cgroup up, and the adopted sandbox stayed frozen, every request
    waiting and its delete leaking it)."""
    import cordonlib
    d = cordonlib.Daemon(shared_dir, keep=True)
    sb = Sandbox.create(endpoint=d.endpoint)
    sb.start(COUNTER)
    sb.exec("sleep 0.3")
    sb.pause()
    assert d.stop() == 0
    d = cordonlib.Daemon(shared_dir)
    try:
        sb = Sandbox.connect(sb.id, endpoint=d.endpoint)
        assert "paused" not in sb.info()
        r = sb.exec("n=$(wc -l < /tmp/count); sleep 1; echo $(( $(wc -l < /tmp/count) - n ))", timeout_s=20)
        assert r.exit_code == 0 and int(r.stdout) >= 5, r  # its counter runs again
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()


def test_what_waits_on_a_paused_sandbox_is_given_up(shared_dir):
    """An exec whose timeout passes while its sandbox is paused cannot be killed (its agent is
    frozen): it is given up after agent_timeout (504), as for any agent that does not answer, instead
    of waiting for a resume that may never come (found by review). A resume past 7 days from the
    creation is refused, as a PATCH's is."""
    import threading
    import cordonlib
    d = cordonlib.Daemon(shared_dir, "--agent-timeout", "2")
    try:
        sb = Sandbox.create(endpoint=d.endpoint)
        box = {}

        def run():
            try:
                box["r"] = sb.exec("sleep 8", timeout_s=1)
            except cordon.CordonError as e:
                box["e"] = e
        t = threading.Thread(target=run)
        t.start()
        time.sleep(0.4)
        sb.pause()
        t0 = time.monotonic()
        t.join(30)
        assert not t.is_alive() and time.monotonic() - t0 < 6, box
        assert "e" in box and box["e"].status == 504, box
        st, body = d.http("POST", f"/v1/sandboxes/{sb.id}/resume", {"timeout_s": 7 * 86400})
        assert st == 400 and body["error"]["field"] == "timeout_s", body
        sb.resume()
        assert sb.exec("echo ok").stdout == "ok\n"
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()
