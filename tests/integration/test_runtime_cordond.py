"""cordon-runtime's containers under cordond (issue 24, docs/runtime.md): with cordond on its socket,
create attaches the container (POST /v1/sandboxes/attach) and cordond supervises it as its own:
seccomp monitor, protected paths, an egress allowlist, on-violation, its events, the egress audit
log and /metrics, labelled oci.container-id. The engine still reaps init and reads its status.

What these catch: annotations that need cordond accepted without it (the container would run without
the guard asked for); violations of a runtime's container that reach no count (before the attach,
io.cordon.protect was refused and a watched unshare was a silent EPERM); a start that takes init's
connection from cordond (init keeps the newest: cordond then lost the container and killed it:
"the container's init hung up before its process started"); a container lost at a cordond restart."""

import json
import os
import subprocess

import pytest

from cordonlib import Daemon, wait_for
from test_runtime import bb, result, rt  # noqa: F401 (bb: the busybox bundle fixture)


@pytest.fixture
def cordond(tmp_path):
    os.makedirs(tmp_path / "cordond")
    d = Daemon(str(tmp_path / "cordond"), "--state-dir", str(tmp_path / "cordond" / "state"), keep=True)
    d.env = {"CORDON_SOCKET": d.socket}
    yield d
    d.stop()


def box_of(d, cid):
    st, body = d.http("GET", f"/v1/sandboxes?label=oci.container-id={cid}")
    assert st == 200, body
    return body["sandboxes"]


def metric(d, name, **labels):
    st, text = d.http("GET", "/metrics")
    want = name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    for line in text.decode().splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    return None


def test_an_attached_container_s_violations_are_cordond_s(bb, cordond):
    d, cfg, root, run = bb
    os.makedirs(d / "rootfs" / "opt" / "answers")
    (d / "rootfs" / "opt" / "answers" / "key").write_text("42\n")
    cfg["annotations"] = {"io.cordon.protect": "/opt/answers/**", "io.cordon.on-violation": "log"}
    before = {k: metric(cordond, "cordon_violations_total", kind=k) or 0 for k in ("protect", "syscall")}
    out, p = run("c1", "sh", "-c", "cat /opt/answers/key; echo cat=$?; unshare -U true; echo unshare=$?; "
                 "sleep 1000", env=cordond.env)
    wait_for(lambda: "unshare=" in open(out / "stdout").read(), timeout=30, what="the command's checks")
    text = open(out / "stdout").read()
    assert "42" not in text and "cat=1" in text and "unshare=1" in text, text
    boxes = box_of(cordond, "c1")
    assert len(boxes) == 1 and boxes[0]["state"] == "running", boxes
    box = boxes[0]["id"]
    st, v = cordond.http("GET", f"/v1/sandboxes/{box}/violations")
    assert v["counts"]["protect"] >= 1 and v["counts"]["syscall"] >= 1, v
    st, ev = cordond.http("GET", f"/v1/sandboxes/{box}/events")
    kinds = [json.loads(x).get("kind") for x in ev.decode().splitlines()]
    assert "protect" in kinds and "syscall" in kinds, ev
    for k in before:
        assert metric(cordond, "cordon_violations_total", kind=k) >= before[k] + 1, k
    # the engine's delete lets it go from cordond as well
    assert rt("kill", "c1", "KILL", root=root, env=cordond.env).returncode == 0
    assert result(out, p)["exit"] == {"signaled": 9}
    assert rt("delete", "c1", root=root, env=cordond.env).returncode == 0
    assert box_of(cordond, "c1") == []


def test_an_exec_s_violations_are_counted_too(bb, cordond):
    """A harness runs most commands with exec (podman exec, kubectl exec): the process hands cordond its
    seccomp listener before it runs, so its watched calls are counted as the first process's are, and
    answered as on_violation says. Shown once: before the hand-over an exec's unshare failed with EPERM
    and the count stayed 0."""
    d, cfg, root, run = bb
    cfg["annotations"] = {"io.cordon.on-violation": "log"}
    out, p = run("c1", "sleep", "1000", env=cordond.env)
    box = box_of(cordond, "c1")[0]["id"]
    r = rt("exec", "c1", "sh", "-c", "unshare -U true; echo unshare=$?", root=root, env=cordond.env)
    assert r.returncode == 0 and "unshare=1" in r.stdout, r
    st, v = cordond.http("GET", f"/v1/sandboxes/{box}/violations")
    assert v["counts"]["syscall"] == 1, v
    st, ev = cordond.http("GET", f"/v1/sandboxes/{box}/events")
    assert any(json.loads(x).get("syscall") == "unshare" for x in ev.decode().splitlines()), ev
    # a detached exec (conmon's) the same
    r = rt("exec", "--detach", "c1", "sh", "-c", "unshare -U true", root=root, env=cordond.env)
    assert r.returncode == 0, r
    wait_for(lambda: cordond.http("GET", f"/v1/sandboxes/{box}/violations")[1]["counts"]["syscall"] == 2,
             timeout=10, what="the detached exec's violation")
    assert rt("delete", "--force", "c1", root=root, env=cordond.env).returncode == 0
    result(out, p)


def test_on_violation_kill_ends_the_container_the_engine_sees(bb, cordond):
    d, cfg, root, run = bb
    cfg["annotations"] = {"io.cordon.on-violation": "kill"}
    out, p = run("c1", "sh", "-c", "echo before; unshare -U true; echo after", env=cordond.env)
    res = result(out, p)
    assert res["exit"] == {"signaled": 9} and "after" not in open(out / "stdout").read(), res
    assert rt("delete", "c1", root=root, env=cordond.env).returncode == 0


def test_an_allowlist_is_cordond_s_egress_with_its_audit_line(bb, cordond, tmp_path):
    """The container gets cordon's network (eth0 in 198.18.0.0/15, cordond's resolver) in place of the
    engine's namespace; a connection outside the list is refused, counted, and written to the audit
    log with the container's id."""
    d, cfg, root, run = bb
    cfg["annotations"] = {"io.cordon.network.allow": "203.0.113.7:80"}
    cfg["linux"]["namespaces"] = [n for n in cfg["linux"]["namespaces"] if n["type"] != "network"] + [
        {"type": "network", "path": "/proc/1/ns/net"}]  # the engine's: left, and said
    out, p = run("c1", "sh", "-c", "grep eth0 /proc/net/dev | cut -d: -f1; cat /etc/resolv.conf; "
                 "echo x | nc -w 3 203.0.113.9 80; echo nc=$?; sleep 1000", env=cordond.env)
    wait_for(lambda: "nc=" in open(out / "stdout").read(), timeout=30, what="the connection attempt")
    text = open(out / "stdout").read()
    assert "eth0" in text and "nameserver 198.1" in text, text
    assert "network namespace is left for cordon's egress" in open(out / "stderr").read()
    box = box_of(cordond, "c1")[0]["id"]
    st, v = cordond.http("GET", f"/v1/sandboxes/{box}/violations")
    assert v["counts"]["egress"] >= 1, v
    log = open(tmp_path / "cordond" / "state" / "egress.log").read().splitlines()
    lines = [json.loads(x) for x in log if "203.0.113.9" in x]
    assert lines and lines[0]["sandbox"] == box and lines[0]["labels"]["oci.container-id"] == "c1", log
    assert lines[0]["decision"] == "deny", lines
    assert rt("delete", "--force", "c1", root=root, env=cordond.env).returncode == 0
    result(out, p)


def test_a_container_survives_cordond_s_restart_and_is_supervised_again(bb, cordond, tmp_path):
    """Created under one cordond, which then crashes (SIGKILL); the next one on the same directory
    takes it back from its record, and the engine's start goes through it."""
    d, cfg, root, run = bb
    cfg["annotations"] = {"io.cordon.on-violation": "log"}
    out, p = run("c1", "sh", "-c", "unshare -U true; echo unshare=$?; sleep 1000", start=False, env=cordond.env)
    box = box_of(cordond, "c1")[0]["id"]
    cordond.kill9()
    again = Daemon(str(tmp_path / "cordond"), "--state-dir", str(tmp_path / "cordond" / "state"), keep=True)
    try:
        assert [b["id"] for b in box_of(again, "c1")] == [box]
        r = rt("start", "c1", root=root, env={"CORDON_SOCKET": again.socket})
        assert r.returncode == 0, r
        wait_for(lambda: "unshare=" in open(out / "stdout").read(), timeout=30, what="the command")
        st, v = again.http("GET", f"/v1/sandboxes/{box}/violations")
        assert v["counts"]["syscall"] >= 1, v
        assert rt("delete", "--force", "c1", root=root, env={"CORDON_SOCKET": again.socket}).returncode == 0
        result(out, p)
        assert box_of(again, "c1") == []
    finally:
        again.stop()


@pytest.mark.parametrize("annotation", ["io.cordon.protect", "io.cordon.network.allow", "io.cordon.on-violation"])
def test_what_only_cordond_enforces_is_refused_without_it(bb, annotation):
    d, cfg, root, run = bb
    cfg["annotations"] = {annotation: {"io.cordon.protect": "/etc/**", "io.cordon.network.allow": "pypi.org:443",
                                       "io.cordon.on-violation": "kill"}[annotation]}
    out, p = run("c1", "true")  # CORDON_SOCKET names no cordond
    res = result(out, p)
    err = open(out / "stderr").read()
    assert res["create"] == 1 and f"annotations.{annotation}: needs cordond" in err, (res, err)
    assert not os.path.exists(os.path.join(root, "c1"))


def test_attach_is_root_s_unix_socket_only_and_checks_its_init(cordond, tmp_path):
    """An attach names host processes: a pid that is not a cordon init with that start time is refused
    (nothing of that process is touched), and the body's fields are named."""
    st, body = cordond.http("POST", "/v1/sandboxes/attach", {"init_pid": os.getpid(), "init_start": 1, "slot": 0,
                                                            "socket": "/tmp/x", "spec": {"tier": "container"}})
    assert st == 400 and body["error"]["field"] == "init_pid", body
    st, body = cordond.http("POST", "/v1/sandboxes/attach", {"init_pid": 2})
    assert st == 400 and body["error"]["field"] == "body", body
    st, body = cordond.http("POST", "/v1/sandboxes/attach", {"init_pid": 5, "init_start": 1, "slot": 0,
                                                            "socket": "/tmp/x", "spec": {"tier": "process"}})
    assert st == 400 and body["error"]["field"] == "tier", body
    assert cordond.http("GET", "/v1/sandboxes")[1]["sandboxes"] == []


def test_a_create_that_fails_after_the_attach_lets_cordond_go(bb, cordond, tmp_path):
    """A createRuntime hook that fails ends the create after cordond took the container: cordond lets it
    go as well. Shown once: before the create's tail detached on failure, the box stayed in cordond's
    list (exited) for its retention."""
    d, cfg, root, run = bb
    hook = tmp_path / "fail.sh"
    hook.write_text("#!/bin/sh\nexit 3\n")
    hook.chmod(0o755)
    cfg["hooks"] = {"createRuntime": [{"path": str(hook)}]}
    out, p = run("c1", "true", env=cordond.env)
    res = result(out, p)
    assert res["create"] == 1 and "hooks.createRuntime[0]" in open(out / "stderr").read(), res
    assert box_of(cordond, "c1") == []
    assert not os.path.exists(os.path.join(root, "c1"))
