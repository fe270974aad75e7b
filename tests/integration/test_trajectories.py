"""Trajectories (issue 23 points 1 and 2, docs/trajectories.md): a sandbox made with
spec.trajectory records each exec in the foreground as a step, on disk before its answer goes;
an exec that names its step runs once, and a re-issue is answered from the log.

What these catch: a re-issued non-idempotent step that ran again (the file had two lines), a step
that was not on disk when cordond was killed after answering it, a different request answered
with another's result, and a cut-off last line taken for a step."""

import json
import os
import subprocess

import pytest

import cordon
from cordon import Sandbox
from cordonlib import CORDON_BIN, Daemon

APPEND = "echo once >> /tmp/log; wc -l < /tmp/log"


@pytest.fixture
def tdaemon(state_daemon):
    return state_daemon


def lines_of(sb):
    return sb.files.read("/tmp/log").decode().splitlines()


def test_steps_are_recorded_and_a_reissued_step_is_replayed(tdaemon, tier):
    with Sandbox.create(endpoint=tdaemon.endpoint, tier=tier, trajectory="run-1/episode.a") as sb:
        r = sb.exec(APPEND, step=0)
        assert (r.exit_code, r.stdout, r.step, r.replayed) == (0, "1\n", 0, False), r
        again = sb.exec(APPEND, step=0)  # the worker was preempted and asks again
        assert (again.stdout, again.step, again.replayed) == ("1\n", 0, True), again
        assert lines_of(sb) == ["once"]  # it ran once
        r = sb.exec(["sh", "-c", "echo out; echo err >&2; exit 3"], env={"K": "v"}, step=1)
        assert (r.exit_code, r.stdout, r.stderr, r.step) == (3, "out\n", "err\n", 1)
        # the same step streamed: the recorded output, then its exit
        ev = list(sb.exec_stream(["sh", "-c", "echo out; echo err >&2; exit 3"], env={"K": "v"}, step=1))
        assert [e["type"] for e in ev] == ["stdout", "stderr", "exit"], ev
        assert ev[0]["data"] == "out\n" and ev[-1]["replayed"] is True and ev[-1]["exit_code"] == 3, ev
        # without a step: the next one
        assert sb.exec("true").step == 2
        # another request for a recorded step, a step ahead of the log, a step in a sandbox without one
        for step, cmd, code in [(0, "echo different", "step_mismatch"), (1, APPEND, "step_mismatch"),
                                (9, APPEND, "step_ahead")]:
            with pytest.raises(cordon.CordonError) as e:
                sb.exec(cmd, step=step)
            assert e.value.status == 409 and e.value.code == code and e.value.field == "step", e.value
        assert lines_of(sb) == ["once"]
        t = sb.trajectory()
        assert t["id"] == "run-1/episode.a" and t["next_step"] == 3 and t["sandbox"] == sb.id, t
        s0, s1 = t["steps"][0], t["steps"][1]
        assert s0["step"] == 0 and s0["kind"] == "exec" and s0["request"]["argv"] == ["sh", "-c", APPEND], s0
        assert s0["result"]["exit_code"] == 0 and s0["result"]["stdout_b64"] == "MQo=", s0
        assert s1["request"]["env"] == {"K": "v"} and s1["result"]["exit_code"] == 3, s1
        assert s0["digest"].startswith("sha256:") and s0["digest"] != s1["digest"], t
        assert s0["time"] > 0 and s0["wall_ms"] >= 0 and s0["sandbox"] == sb.id, s0
    with Sandbox.create(endpoint=tdaemon.endpoint, tier=tier) as plain:
        with pytest.raises(cordon.InvalidArgument) as e:
            plain.exec("true", step=0)
        assert e.value.field == "step", e.value


def test_violations_during_a_step_are_its_own(tdaemon):
    with Sandbox.create(endpoint=tdaemon.endpoint, trajectory="viol-1") as sb:
        sb.exec("true", step=0)
        sb.exec("mount -t tmpfs x /mnt 2>/dev/null; true", step=1)
        steps = sb.trajectory()["steps"]
        assert steps[0]["violations"] == {}, steps[0]
        assert steps[1]["violations"].get("syscall", 0) >= 1, steps[1]


def test_a_step_answered_before_a_kill9_is_replayed_after_it(shared_dir):
    """kill -9 of cordond right after a step's answer: the next cordond adopts the sandbox and
    answers the re-issued step from the log; the command ran once."""
    state = os.path.join(shared_dir, "state")
    d = Daemon(shared_dir, "--state-dir", state, keep=True)
    sb = Sandbox.create(endpoint=d.endpoint, trajectory="preempted")
    assert sb.exec(APPEND, step=0).stdout == "1\n"
    d.kill9()
    d2 = Daemon(shared_dir, "--state-dir", state)
    try:
        again = Sandbox.connect(sb.id, endpoint=d2.endpoint)
        r = again.exec(APPEND, step=0)
        assert (r.stdout, r.replayed) == ("1\n", True), r
        assert lines_of(again) == ["once"]
        r = again.exec(APPEND, step=1)
        assert (r.stdout, r.replayed, r.step) == ("2\n", False, 1), r
        again.kill()
    finally:
        assert d2.stop() == 0, d2.output()


def test_a_cut_off_last_line_is_not_a_step(shared_dir):
    state = os.path.join(shared_dir, "state")
    d = Daemon(shared_dir, "--state-dir", state)
    try:
        with Sandbox.create(endpoint=d.endpoint, trajectory="torn") as sb:
            sb.exec("echo a", step=0)
    finally:
        assert d.stop() == 0, d.output()
    log = os.path.join(state, "trajectories", "torn", "steps.jsonl")
    with open(log, "ab") as f:
        f.write(b'{"step": 1, "kind": "exec", "resu')  # a crash in the middle of the write
    d = Daemon(shared_dir, "--state-dir", state)
    try:
        t = cordon.trajectory("torn", d.endpoint)
        assert t["next_step"] == 1 and len(t["steps"]) == 1 and t["sandbox"] is None, t
        with open(log, "rb") as f:
            assert f.read().endswith(b"}\n")  # cut back to the last whole step
        with Sandbox.create(endpoint=d.endpoint, trajectory="torn") as sb:  # a new sandbox goes on with it
            assert sb.exec("echo b", step=1).step == 1
        assert [s["step"] for s in cordon.trajectory("torn", d.endpoint)["steps"]] == [0, 1]
    finally:
        assert d.stop() == 0, d.output()


def test_one_sandbox_records_a_trajectory_at_a_time(tdaemon):
    with Sandbox.create(endpoint=tdaemon.endpoint, trajectory="solo"):
        with pytest.raises(cordon.CordonError) as e:
            Sandbox.create(endpoint=tdaemon.endpoint, trajectory="solo")
        assert e.value.status == 409 and e.value.code == "trajectory_in_use", e.value
    for bad in ["", "a//b", "../x", "a/./b", "sp ace", "x" * 65, "/lead"]:
        with pytest.raises(cordon.InvalidArgument) as e:
            Sandbox.create(endpoint=tdaemon.endpoint, trajectory=bad)
        assert e.value.field == "trajectory", (bad, e.value)
    st, body = tdaemon.http("GET", "/v1/trajectories/no-such")
    assert st == 404 and body["error"]["code"] == "trajectory_not_found", body
    st, body = tdaemon.http("GET", "/v1/trajectories/a/../b")
    assert st == 400, body


def test_the_cli_shows_and_exports_a_trajectory(tdaemon):
    with Sandbox.create(endpoint=tdaemon.endpoint, trajectory="cli-1") as sb:
        sb.exec("echo hi", step=0)
        sb.exec("exit 2", step=1)
        env = dict(os.environ, CORDON_SOCKET=tdaemon.socket)
        show = subprocess.run([CORDON_BIN, "trajectory", "show", "cli-1"], env=env, capture_output=True, text=True)
        assert show.returncode == 0, show.stderr
        rows = show.stdout.splitlines()
        assert rows[0].split()[:4] == ["0", "exec", "exit", "0"] and "echo hi" in rows[0], rows
        assert rows[1].split()[:4] == ["1", "exec", "exit", "2"], rows
        assert rows[2] == f"next step 2, sandbox {sb.id}", rows
        out = subprocess.run([CORDON_BIN, "trajectory", "export", "cli-1"], env=env, capture_output=True, text=True)
        steps = [json.loads(line) for line in out.stdout.splitlines()]
        assert [s["step"] for s in steps] == [0, 1] and steps[1]["result"]["exit_code"] == 2, steps
        bad = subprocess.run([CORDON_BIN, "trajectory", "show", "../x"], env=env, capture_output=True, text=True)
        assert bad.returncode == 125 and "usage" in bad.stderr
        # cordon exec --step (the C client's cordon_exec_step): run once, the re-issue answered
        for _ in range(2):
            r = subprocess.run([CORDON_BIN, "exec", "--step", "2", sb.id, "--", "sh", "-c", APPEND + "; exit 4"],
                               env=env, capture_output=True, text=True)
            assert (r.returncode, r.stdout) == (4, "1\n"), r
        assert lines_of(sb) == ["once"]
        r = subprocess.run([CORDON_BIN, "exec", "--step", "2", sb.id, "--", "true"], env=env, capture_output=True,
                           text=True)
        assert r.returncode == 125 and "was another request" in r.stderr, r


def test_a_file_write_is_a_step_too(tdaemon):
    with Sandbox.create(endpoint=tdaemon.endpoint, trajectory="writes-1") as sb:
        w = sb.files.write("/tmp/patch.diff", b"v1", step=0)
        assert w["step"] == 0 and w["size"] == 2 and "replayed" not in w, w
        sb.files.write("/tmp/patch.diff", b"changed by the agent")  # step 1, no index given
        again = sb.files.write("/tmp/patch.diff", b"v1", step=0)  # re-issued: answered, not written
        assert again["replayed"] is True and again["step"] == 0 and again["size"] == 2, again
        assert sb.files.read("/tmp/patch.diff") == b"changed by the agent"
        with pytest.raises(cordon.CordonError) as e:
            sb.files.write("/tmp/patch.diff", b"v2", step=0)  # other bytes for a recorded step
        assert e.value.status == 409 and e.value.code == "step_mismatch", e.value
        steps = sb.trajectory()["steps"]
        assert [(s["step"], s["kind"]) for s in steps] == [(0, "write"), (1, "write")], steps
        assert steps[0]["request"]["bytes"] == 2 and steps[0]["request"]["sha256"].startswith("sha256:"), steps[0]
        st, body = tdaemon.http("PUT", f"/v1/sandboxes/{sb.id}/archive?path=/tmp&step=2", b"")
        assert st == 400 and body["error"]["field"] == "step", body


def test_a_step_whose_client_left_is_not_recorded(tdaemon):
    """A worker preempted in the middle of a step: its connection goes, cordond kills the command and
    records nothing, so the re-issued step runs (before the fix the killed run's 137 was recorded
    and replayed to the re-issue)."""
    import time
    with Sandbox.create(endpoint=tdaemon.endpoint, trajectory="left-1") as sb:
        gen = sb.exec_stream("echo started; sleep 30; echo never", step=0)
        assert next(gen)["data"] == "started\n"
        gen.close()  # the client hangs up
        deadline = time.time() + 30
        while True:
            try:
                r = sb.exec("echo started; echo ran", step=0)  # a different request: step 0 is free
                break
            except cordon.CordonError as e:
                assert e.code == "step_in_progress" and time.time() < deadline, e
                time.sleep(0.1)
        assert (r.stdout, r.replayed, r.step) == ("started\nran\n", False, 0), r
        assert [s["request"]["argv"][2] for s in sb.trajectory()["steps"]] == ["echo started; echo ran"]


def test_a_long_trajectory_is_read_in_pages(tdaemon):
    """GET /v1/trajectories/{id} answers a page (?from=K&limit=N, at most 1,000 steps by default):
    a log of any length is never one answer. The SDK and the CLI read every page: without the
    paging loop they would stop at step 999 of these 1,002."""
    with Sandbox.create(endpoint=tdaemon.endpoint, trajectory="long-1") as sb:
        for k in range(1002):
            sb.files.write("/tmp/k", str(k).encode(), step=k)
        path = "/v1/trajectories/long-1"
        first = tdaemon.endpoint.json("GET", path)
        assert (len(first["steps"]), first["from"], first["more"], first["next_step"]) == (1000, 0, True, 1002)
        page = tdaemon.endpoint.json("GET", path + "?from=999&limit=2")
        assert [s["step"] for s in page["steps"]] == [999, 1000] and page["more"] is True, page
        last = tdaemon.endpoint.json("GET", path + "?from=1000&limit=10")
        assert [s["step"] for s in last["steps"]] == [1000, 1001] and last["more"] is False
        past = tdaemon.endpoint.json("GET", path + "?from=5000")
        assert past["steps"] == [] and past["more"] is False and past["next_step"] == 1002
        for q, field in [("from=-1", "from"), ("from=x", "from"), ("limit=0", "limit"), ("limit=10001", "limit"),
                         ("limit=", "limit")]:
            with pytest.raises(cordon.CordonError) as e:
                tdaemon.endpoint.json("GET", f"{path}?{q}")
            assert (e.value.status, e.value.field) == (400, field), (q, e.value)
        # the SDK and the CLI: every page, in order
        t = sb.trajectory()
        assert [s["step"] for s in t["steps"]] == list(range(1002)) and t["more"] is False
        env = dict(os.environ, CORDON_SOCKET=tdaemon.socket)
        out = subprocess.run([CORDON_BIN, "trajectory", "export", "long-1"], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert [json.loads(line)["step"] for line in out.stdout.splitlines()] == list(range(1002))


def test_a_call_is_a_step_too(tdaemon):
    """The process tier's calls are steps (kind "call"): recorded before the answer, and a re-issued
    one is answered from the log without running (run again, it drew other random bytes); other code
    for a recorded step is 409."""
    draw = "import os\nos.urandom(16).hex()"
    with Sandbox.create(endpoint=tdaemon.endpoint, tier="process", trajectory="calls-1") as sb:
        assert sb.exec("true", step=0).exit_code == 0  # an exec and calls: one trajectory
        r = sb.call(draw, step=1)
        assert (len(r.result), r.step, r.replayed) == (32, 1, False), vars(r)
        again = sb.call(draw, step=1)
        assert (again.result, again.step, again.replayed) == (r.result, 1, True), vars(again)
        assert sb.call(draw).result != r.result  # no step given: the next (2), and it runs
        with pytest.raises(cordon.CordonError) as e:
            sb.call("1 + 1", step=1)
        assert (e.value.status, e.value.code) == (409, "step_mismatch"), e.value
        with pytest.raises(cordon.CordonError) as e:
            sb.call("1", step=-1)
        assert (e.value.status, e.value.field) == (400, "step"), e.value
        steps = sb.trajectory()["steps"]
        assert [(s["step"], s["kind"]) for s in steps] == [(0, "exec"), (1, "call"), (2, "call")], steps
        assert steps[1]["request"]["code"] == draw and steps[1]["result"]["result"] == r.result, steps[1]
    # a call without a trajectory: no step in its answer
    with Sandbox.create(endpoint=tdaemon.endpoint, tier="process") as sb:
        r = sb.call("2")
        assert (r.result, r.step) == (2, None)
        with pytest.raises(cordon.CordonError) as e:
            sb.call("2", step=0)
        assert (e.value.status, e.value.field) == (400, "step"), e.value


# A call that answers itself: it writes its own result frame on the channel to the agent ('<II' length,
# flags; as tests/integration/test_process_calls.py's forger does), with the fields cordond adds.
SELF_ANSWER = r"""
import json, os, struct, time
forged = json.dumps({"result": "forged", "stdout": "", "stderr": "", "error": None, "duration_ms": 0.1,
                     "timed_out": False, "step": 99, "replayed": True, "step_recorded": False,
                     "step_error": "forged"}).encode()
for fd in os.listdir('/proc/self/fd'):
    try:
        if os.readlink('/proc/self/fd/' + fd).startswith('socket:'):
            os.write(int(fd), struct.pack('<II', len(forged), 0) + forged)
    except OSError:
        pass
time.sleep(2)
"""


@pytest.mark.parametrize("trajectory", [None, "forge-1"], ids=["no-trajectory", "trajectory"])
def test_a_call_cannot_forge_its_step_fields(tdaemon, trajectory):
    """step, replayed, step_recorded and step_error are cordond's to say: a call's code that writes
    its own answer may say what it likes of its result, not of these. Seen failing before cordond
    dropped them: the answer said replayed True and step 99 (a pipeline then skips a step that ran)."""
    with Sandbox.create(endpoint=tdaemon.endpoint, tier="process", trajectory=trajectory) as sb:
        c = sb.call(SELF_ANSWER, step=0 if trajectory else None, timeout_s=20)
        d = vars(c)
        assert c.replayed is False and c.step == (0 if trajectory else None), d
        raw = tdaemon.endpoint.json("POST", f"/v1/sandboxes/{sb.id}/call",
                                    {"code": SELF_ANSWER, "language": "python", "timeout_s": 20})
        assert "step_recorded" not in raw and "step_error" not in raw and "replayed" not in raw, raw
        assert raw.get("step") == (1 if trajectory else None), raw
