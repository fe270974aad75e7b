"""The user a command runs as (issue 20 point 4): an OCI image config's User, the spec's and an
exec's "user" (Docker's forms: name, uid, name:group, uid:gid), names looked up in the sandbox's own
/etc/passwd and /etc/group. Container tier only. The images are OCI layouts the tests write
(registry.py); cordond reads them as "oci:DIR:TAG" references."""

import os
import socket
import subprocess
import tarfile
import time

import pytest

import cordonlib
from cordonlib import run
from registry import Layer
from test_images import busybox_layer
from test_images_api import ImageDaemon

PASSWD = ("root:x:0:0:root:/root:/bin/sh\ndev:x:1000:1000::/home/dev:/bin/sh\n"
          "app:x:1001:1002:App:/home/app:/bin/sh\n")
GROUP = "root:x:0:\ndev:x:1000:\napp:x:1002:\nextra:x:3000:app,dev\n"
SHOW = ["sh", "-c", "id -u; id -G; echo $HOME"]


def user_image(oci_layout, user=None, etc=None):
    """The busybox base with PASSWD and GROUP (or etc(layer) for a hostile /etc), config User."""
    top = Layer().dir("home/dev", uid=1000, gid=1000).dir("home/app", uid=1001, gid=1002)
    if etc:
        etc(top)
    else:
        top.file("etc/passwd", PASSWD).file("etc/group", GROUP)
    lay = oci_layout()
    config = {"Env": ["PATH=/bin"]}
    if user:
        config["User"] = user
    lay.tag(lay.new_image([busybox_layer(), top], compression="gzip", config=config), "v1")
    return f"oci:{lay.path}:v1"


def test_image_user_applies_and_the_spec_overrides_it(oci_layout):
    numeric = user_image(oci_layout, "1000:1000")
    r = run(["--image", numeric, "--", *SHOW], timeout=120)
    assert (r.code, r.stdout) == (0, "1000\n1000 3000\n/home/dev\n"), r  # dev is in extra: a supplementary group
    named = user_image(oci_layout, "app")
    r = run(["--image", named, "--", *SHOW], timeout=120)
    assert (r.code, r.stdout) == (0, "1001\n1002 3000\n/home/app\n"), r
    r = run(["--image", named, "--user", "0", "--", *SHOW], timeout=120)  # the spec wins over the image
    assert (r.code, r.stdout) == (0, "0\n0\n/root\n"), r
    r = run(["--image", named, "--user", "dev:app", "--", *SHOW], timeout=120)
    assert (r.code, r.stdout) == (0, "1000\n1002 3000\n/home/dev\n"), r
    r = run(["--image", named, "--env", "HOME=/tmp", "--", "sh", "-c", "echo $HOME"], timeout=120)
    assert (r.code, r.stdout) == (0, "/tmp\n"), r  # an env's HOME is kept


def test_cordons_workspace_is_the_users(oci_layout):
    """cordon's own working directory, /workspace, belongs to a non-root user, who can work where its
    commands start; one the image ships with files in it stays as the image has it. What this
    catches: before, /workspace stayed root's and `touch` there failed with EACCES."""
    where = ["sh", "-c", "pwd; stat -c %u:%g .; touch f 2>/dev/null && echo wrote || echo refused"]
    r = run(["--image", user_image(oci_layout, "app"), "--", *where], timeout=120)
    assert (r.code, r.stdout) == (0, "/workspace\n1001:1002\nwrote\n"), r
    r = run(["--image", user_image(oci_layout, "app"), "--user", "0", "--", *where], timeout=120)
    assert (r.code, r.stdout) == (0, "/workspace\n0:0\nwrote\n"), r
    shipped = user_image(oci_layout, "app", etc=lambda top: top.file("etc/passwd", PASSWD).file("etc/group", GROUP)
                         .dir("workspace").file("workspace/README", "the image's\n"))
    r = run(["--image", shipped, "--", *where], timeout=120)
    assert (r.code, r.stdout) == (0, "/workspace\n0:0\nrefused\n"), r


def test_a_command_with_a_user_holds_no_capability(oci_layout):
    # What this catches: a command child that keeps what init holds (CAP_SETUID, CAP_KILL, ...) in any
    # set, as root or not: CapBnd/CapAmb/CapPrm/CapEff/CapInh must all be zero.
    ref, plain = user_image(oci_layout, "app"), user_image(oci_layout)
    for image, user in ((ref, "app"), (ref, "0"), (plain, None)):
        r = run(["--image", image, *(["--user", user] if user else []), "--", "grep", "^Cap", "/proc/self/status"],
                timeout=120)
        assert r.code == 0, r
        caps = dict(line.split(":\t") for line in r.stdout.splitlines())
        assert set(caps) == {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}, caps
        assert all(int(v, 16) == 0 for v in caps.values()), (user, caps)


def test_an_unknown_user_is_a_clear_error(oci_layout):
    ref = user_image(oci_layout)
    r = run(["--image", ref, "--user", "ghost", "--", "true"], timeout=120)
    assert r.code != 0 and "user: no user 'ghost' in the sandbox's /etc/passwd" in r.stderr, r
    r = run(["--image", ref, "--user", "dev:ghosts", "--", "true"], timeout=120)
    assert r.code != 0 and "no group 'ghosts'" in r.stderr, r
    r = run(["--image", ref, "--user", "70000", "--", "true"], timeout=120)
    assert r.code != 0 and "user" in r.stderr, r


def _fifo(layer):
    ti = tarfile.TarInfo("etc/passwd")
    ti.type, ti.mode = tarfile.FIFOTYPE, 0o644
    return layer.raw(ti).file("etc/group", GROUP)


@pytest.mark.parametrize("etc,why", [
    (lambda l: l.symlink("etc/passwd", "/proc/self/environ").file("etc/group", GROUP), "procfs|Permission denied"),
    (lambda l: l.symlink("etc/passwd", "../../../../../../etc/shadow").file("etc/group", GROUP), "no user"),
    (_fifo, "not a regular file"),
    (lambda l: l.file("etc/passwd", b"x" * (20 << 20)).file("etc/group", GROUP), "over 16 MiB"),
    (lambda l: l.file("etc/passwd", "app:x:" + "9" * 30 + ":1::/:/bin/sh\n").file("etc/group", GROUP), "outside"),
], ids=["proc-symlink", "escaping-symlink", "fifo", "20MiB", "huge-uid"])
def test_a_hostile_passwd_is_refused_without_a_hang(oci_layout, etc, why):
    # What this catches: a reader that follows the image's /etc/passwd out of the sandbox's root or
    # into procfs, blocks on a FIFO (the run would time out), reads a file of any size, or takes an
    # id it cannot hold. The image is the agent's as much as the files it writes.
    try:
        ref = user_image(oci_layout, "app", etc=etc)
    except (ValueError, tarfile.TarError) as e:  # the harness cannot write it: nothing to test
        pytest.skip(f"layer: {e}")
    t0 = time.monotonic()
    r = run(["--image", ref, "--", "true"], timeout=120)
    assert time.monotonic() - t0 < 100
    if why == "not a regular file" and "image" in r.stderr and "user" not in r.stderr:
        pytest.skip("the layer applier refuses FIFOs: " + r.stderr)  # unit test covers the reader
    assert r.code != 0 and "user" in r.stderr and any(w in r.stderr for w in why.split("|")), r
    # numeric ids need no file: a hostile one costs them the home, not the command (which reads no
    # passwd itself: busybox id would block on the FIFO)
    r = run(["--image", ref, "--user", "1000:1000", "--", "grep", "^Uid", "/proc/self/status"], timeout=120)
    assert (r.code, r.stdout.split()) == (0, ["Uid:", "1000", "1000", "1000", "1000"]), r


def test_a_non_container_tier_refuses_user():
    r = run(["--tier", "process", "--user", "1000", "--", "true"])
    assert r.code != 0 and "user: not supported on tier process" in r.stderr, r


@pytest.fixture
def image_daemon(shared_dir):
    d = ImageDaemon(shared_dir)
    yield d
    code = d.stop()
    assert code == 0, f"cordond exited {code}:\n{d.output()}"


def _exec(d, sid, body):
    return d.http("POST", f"/v1/sandboxes/{sid}/exec", body)


def test_api_spec_and_exec_user(image_daemon, oci_layout):
    d = image_daemon
    ref = user_image(oci_layout, "app")
    st, sb = d.http("POST", "/v1/sandboxes", {"image": ref})
    assert st in (200, 201), sb
    sid = sb["id"]
    st, r = _exec(d, sid, {"cmd": SHOW})
    assert (st, r["stdout"]) == (200, "1001\n1002 3000\n/home/app\n"), r
    st, r = _exec(d, sid, {"cmd": SHOW, "user": "0"})
    assert (st, r["stdout"]) == (200, "0\n0\n/root\n"), r
    st, r = _exec(d, sid, {"cmd": SHOW, "user": "1000:1000"})
    assert (st, r["stdout"]) == (200, "1000\n1000 3000\n/home/dev\n"), r
    st, r = _exec(d, sid, {"cmd": ["true"], "user": "ghost"})
    assert st == 400 and r["error"]["field"] == "user" and "ghost" in r["error"]["message"], r
    st, r = _exec(d, sid, {"cmd": ["true"], "user": "a b"})
    assert st == 400 and r["error"]["field"] == "user", r
    st, r = d.http("POST", "/v1/sandboxes", {"image": ref, "user": "ghost"})
    assert st == 400 and r["error"]["field"] == "user" and "ghost" in r["error"]["message"], r
    st, proc = d.http("POST", "/v1/sandboxes", {"tier": "process", "user": "1000"})
    assert st == 400 and proc["error"]["field"] == "user" and "tier process" in proc["error"]["message"], proc
    st, proc = d.http("POST", "/v1/sandboxes", {"tier": "process"})
    assert st in (200, 201), proc
    st, r = _exec(d, proc["id"], {"cmd": ["true"], "user": "0"})
    assert st == 400 and r["error"]["message"] == "user: not supported on tier process", r
    # a verifier step takes no spec user and refuses another than root (its access() checks judge
    # by the calling uid); the image's /etc is root's, but landlock keeps it read-only, and the
    # host says so (CDN_EXEC_SYSTEM_RO): the step runs in place
    st, r = _exec(d, sid, {"cmd": ["id", "-u"], "verifier": True})
    assert (st, r.get("stdout")) == (200, "0\n"), r
    st, r = _exec(d, sid, {"cmd": ["id", "-u"], "verifier": True, "user": "app"})
    assert st in (400, 409) and "verifier step runs as root" in r["error"]["message"], r
    for i in (sid, proc["id"]):
        assert d.http("DELETE", f"/v1/sandboxes/{i}")[0] in (200, 204)


def test_timeout_and_signals_reach_a_non_root_command(image_daemon, oci_layout):
    # What this catches: init without CAP_KILL (or with it only permitted, not effective) cannot
    # signal a command of another uid: with CAP_KILL dropped in init this test fails — the command
    # outlives its timeout (the exec returns only when sleep ends, 60 s on), and the streamed
    # command whose client went away is still in `ps` afterwards.
    d = image_daemon
    ref = user_image(oci_layout, "1000:1000")
    st, sb = d.http("POST", "/v1/sandboxes", {"image": ref})
    assert st in (200, 201), sb
    sid = sb["id"]
    t0 = time.monotonic()
    st, r = _exec(d, sid, {"cmd": ["sh", "-c", "sleep 60; echo late"], "timeout_s": 1})
    took = time.monotonic() - t0
    assert st == 200 and r["timed_out"] and r["exit_code"] == 124 and took < 20, (r, took)
    # a streamed exec whose client goes away: cordond sends SIGKILL (the SIGNAL frame)
    s = socket.socket(socket.AF_UNIX)
    s.connect(d.socket)
    body = b'{"cmd": ["sleep", "300"], "stream": true}'
    s.sendall(b"POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (sid.encode(), len(body), body))
    time.sleep(1.5)
    st, r = _exec(d, sid, {"cmd": ["sh", "-c", "ps -o user,args | grep '[s]leep 300' || true"]})
    assert st == 200 and "sleep 300" in r["stdout"] and r["stdout"].split()[0] in ("1000", "dev"), r
    s.close()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        st, r = _exec(d, sid, {"cmd": ["sh", "-c", "ps -o args | grep '[s]leep 300' || true"]})
        if st == 200 and r["stdout"] == "":
            break
        time.sleep(0.5)
    assert r["stdout"] == "", r
    assert d.http("DELETE", f"/v1/sandboxes/{sid}")[0] in (200, 204)


def test_cli_exec_user_and_the_host_image(daemon):
    """cordon exec --user on a sandbox of the host image (its /etc is the host's, seen from the
    sandbox; numeric ids need none of it), and cordon create --user."""
    env = dict(os.environ, CORDON_SOCKET=daemon.socket)

    def cli(*args):
        return subprocess.run([cordonlib.CORDON_BIN, *args], capture_output=True, text=True, env=env, timeout=60)

    r = cli("create")
    assert r.returncode == 0, r
    sid = r.stdout.strip()
    r = cli("exec", sid, "--user", "1234:5678", "--", "sh", "-c", "id -u; id -g; echo $HOME")
    assert (r.returncode, r.stdout) == (0, "1234\n5678\n/\n"), r
    r = cli("exec", sid, "--", "id", "-u")
    assert (r.returncode, r.stdout) == (0, "0\n"), r
    r = cli("exec", sid, "--user", "no-such-user-here", "--", "true")
    assert r.returncode != 0 and "user: no user 'no-such-user-here'" in r.stderr, r
    assert cli("kill", sid).returncode == 0
    r = cli("create", "--user", "2000:2000")
    assert r.returncode == 0, r
    sid = r.stdout.strip()
    r = cli("exec", sid, "--", "id", "-u")
    assert (r.returncode, r.stdout) == (0, "2000\n"), r
    assert cli("kill", sid).returncode == 0


def test_the_sdk_passes_user(image_daemon, oci_layout):
    from cordon import Sandbox
    ref = user_image(oci_layout)
    with Sandbox.create(endpoint=image_daemon.endpoint, image=ref, user="dev") as sb:
        assert sb.exec(["id", "-u"]).stdout == "1000\n"
        assert sb.exec(["id", "-u"], user="app").stdout == "1001\n"


def test_quiesce_ends_non_root_processes(image_daemon):
    # What this catches: QUIESCE (before a verifier step) signals every process of the sandbox; with
    # CAP_KILL not effective in init, a process of uid 1000 the agent left behind survives it and
    # shares the sandbox with the verifier step (checked: the step then never starts, 504 after 60 s).
    d = image_daemon
    st, sb = d.http("POST", "/v1/sandboxes", {"user": "1000:1000"})
    assert st in (200, 201), sb
    sid = sb["id"]
    st, r = _exec(d, sid, {"cmd": ["sh", "-c", "setsid sleep 300 >/dev/null 2>&1 < /dev/null & echo started"]})
    assert (st, r["stdout"]) == (200, "started\n"), r
    st, r = _exec(d, sid, {"cmd": ["sh", "-c", "ps -o user,args | grep '[s]leep 300' || true"]})
    assert st == 200 and "sleep 300" in r["stdout"], r
    st, r = _exec(d, sid, {"cmd": ["sh", "-c", "id -u; ps -o args | grep '[s]leep 300' || echo none"], "verifier": True})
    assert st == 200 and r["stdout"] == "0\nnone\n", r
    assert d.http("DELETE", f"/v1/sandboxes/{sid}")[0] in (200, 204)
