"""The unmodified E2B SDK (npm `e2b`, pinned in tests/e2b/package-lock.json, installed by
tests/run-all) driving cordond through its E2B-compatible routes (src/daemon/e2b.c, docs/e2b.md):
the SDK is configured by E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL alone, as a user's script
would be, and what it did is checked again through cordon's own API."""

import json
import os
import pathlib
import shutil
import subprocess

import pytest

from cordonlib import Daemon, tcp_listener
from cordon import Sandbox
from testenv import REPO, need

E2B_DIR = os.path.join(REPO, "tests", "e2b")


def envd_call(env, sid, method, path, body=b"", headers=None):
    """One request to sandbox sid's daemon routes on cordond's listener: (status, body bytes)."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", int(env["E2B_API_URL"].rsplit(":", 1)[1]), timeout=30)
    c.request(method, path, body=body, headers=dict({"X-API-KEY": env["E2B_API_KEY"], "E2b-Sandbox-Id": sid},
                                                    **(headers or {})))
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def start(shared_dir, *extra):
    """(daemon, env, run): a cordond on 127.0.0.1 with a token (and extra flags), the E2B SDK's
    environment for it, and run(script, **env) → the JSON object the script printed."""
    need(shutil.which("node") and os.path.isdir(os.path.join(E2B_DIR, "node_modules", "e2b")),
         "Node.js and the E2B SDK (cd tests/e2b && npm ci)")
    flags, port, token = tcp_listener(shared_dir)
    d = Daemon(shared_dir, *flags, *extra)
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, E2B_API_KEY=token, E2B_API_URL=url, E2B_SANDBOX_URL=url)

    def run(script, **more):
        p = subprocess.run(["node", script], cwd=E2B_DIR, env=dict(env, **more), capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, (p.stdout, p.stderr, d.output())
        return json.loads(p.stdout.strip().splitlines()[-1])

    return d, env, run


@pytest.fixture
def e2b(shared_dir):
    d, env, run = start(shared_dir)
    yield d, env, run
    assert d.stop() == 0, d.output()


def test_the_control_plane(e2b):
    d, env, run = e2b
    out = run("control.mjs")
    sid = out["id"]
    assert out["running"] is True
    info = out["info"]
    assert info["templateId"] == "base" and info["state"] == "running" and info["envdVersion"] == "0.6.4"
    assert info["metadata"] == {"job": "j1", "a b": "c&d"}, info  # cordon's own label (e2b.template) not in it
    assert 119_000 <= info["ends"] <= 121_000, info
    assert out["listed"] == [sid] and out["listedNone"] == 0, out
    assert 25_000 <= out["endsAfter"] <= 31_000, out  # setTimeout: 30 s from then
    assert out["connected"] == sid
    # getMetrics: one sample, now, of cordon's usage (no history: a window in the past has none)
    [m] = out["metrics"]
    assert -2_000 < m["age"] < 5_000 and m["cpuCount"] == 1 and m["memTotal"] == 512 << 20, m
    assert 0 < m["cpuUsedPct"] <= 100 and 0 < m["memUsed"] < m["memTotal"], m
    assert 0 < m["diskUsed"] < m["diskTotal"] <= 1024 << 20, m
    assert out["metricsPast"] == [], out
    assert out["killed"] is True and out["killedAgain"] is False, out
    assert out["runningAfter"] is False
    assert out["connectMissing"].startswith("SandboxNotFoundError"), out
    assert out["badTemplate"].startswith("SandboxError") and "no such template" in out["badTemplate"], out
    assert out["badKey"].startswith("AuthenticationError"), out
    # The sandbox was cordon's: its events say what the E2B calls did.
    st, body = d.http("GET", f"/v1/sandboxes/{sid}")
    assert st in (404, 410) or body["state"] != "running", body


def test_a_sandbox_made_through_e2b_is_cordons(e2b):
    """Its metadata are labels, envVars its environment, its timeout its lifetime; cordon's own
    SDK reaches it."""
    d, env, run = e2b
    sid = run("create.mjs")["id"]
    sb = Sandbox.connect(sid, endpoint=d.endpoint)
    info = sb.info()
    assert info["spec"]["labels"] == {"job": "j2", "e2b.template": "base"}, info
    assert 89 <= info["spec"]["limits"]["timeout_s"] <= 91, info
    assert sb.exec(["sh", "-c", "echo $FOO"]).stdout == "bar baz\n"
    sb.kill()


def test_envd_needs_the_sandboxs_own_token(e2b):
    """envd's X-Access-Token reaches the sandbox it was made for and no other; the control plane
    takes only the API key, whatever other header comes with it. Without the id in the token (one
    token for all sandboxes, tried once) the two tokens came out equal, and A's opened B."""
    d, env, run = e2b
    port = int(env["E2B_API_URL"].rsplit(":", 1)[1])
    a = Sandbox.create(endpoint=d.endpoint)
    b = Sandbox.create(endpoint=d.endpoint)
    try:
        import http.client
        created = {}
        for sb in (a, b):  # the tokens, as connect hands them out
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("POST", f"/v2/sandboxes/{sb.id}/connect", body=b"{}",
                      headers={"X-API-KEY": env["E2B_API_KEY"], "Content-Type": "application/json"})
            r = c.getresponse()
            created[sb.id] = json.loads(r.read())
            assert r.status == 200, created[sb.id]
            c.close()

        def health(sid, token):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("GET", "/health", headers={"E2b-Sandbox-Id": sid, "X-Access-Token": token})
            r = c.getresponse()
            r.read()
            c.close()
            return r.status

        ta, tb = created[a.id]["envdAccessToken"], created[b.id]["envdAccessToken"]
        assert len(ta) == 64 and ta != tb
        assert health(a.id, ta) == 204 and health(b.id, tb) == 204
        assert health(b.id, ta) == 401
        assert health(a.id, "0" * 64) == 401
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/v2/sandboxes", body=b'{"templateID":"base"}',
                  headers={"X-Access-Token": ta, "E2b-Sandbox-Id": a.id, "Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 401 and json.loads(r.read())["code"] == 401
    finally:
        a.kill()
        b.kill()


def test_bad_create_bodies_get_e2b_errors(e2b):
    d, env, run = e2b
    import http.client
    port = int(env["E2B_API_URL"].rsplit(":", 1)[1])
    for body, needle in [
        (b"not json", "expected a JSON object"),
        (b'{"templateID": 7}', "templateID"),
        (b'{"timeout": -1}', "timeout"),
        (b'{"timeout": 1.5}', "timeout"),
        (b'{"envVars": {"A": 1}}', "envVars.A"),
        (b'{"envVars": {"A=B": "x"}}', "envVars.A=B"),
        (b'{"metadata": {"e2b.template": "x"}}', "cordon's own"),
        (b'{"metadata": []}', "metadata"),
        (b'{"autoPause": true}', "autoPause: not supported"),
        (b'{"network": {"denyOut": ["0.0.0.0/0"]}}', "denyOut: not supported"),
        (b'{"network": {"allowOut": "x"}}', "allowOut"),
        (b'{"allow_internet_access": "yes"}', "allow_internet_access"),
    ]:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/v2/sandboxes", body=body,
                  headers={"X-API-KEY": env["E2B_API_KEY"], "Content-Type": "application/json"})
        r = c.getresponse()
        err = json.loads(r.read())
        c.close()
        assert r.status == 400 and err["code"] == 400 and needle in err["message"], (body, err)
    st, listed = d.http("GET", "/v1/sandboxes")
    assert listed["sandboxes"] == []  # none of them made one
    sid = d.http("POST", "/v1/sandboxes", {})[1]["id"]
    for query, needle in [("?foo=1", "foo: unknown parameter"), ("?start=x", "start: expected unix seconds"),
                          ("?end=-5", "end: expected unix seconds")]:
        st, body = envd_call(env, sid, "GET", f"/sandboxes/{sid}/metrics{query}")
        assert st == 400 and needle in json.loads(body)["message"], (query, body)
    assert d.http("DELETE", f"/v1/sandboxes/{sid}")[0] in (200, 204)


def test_commands(e2b):
    """commands.run (output, exit codes, CommandExitError, envs, cwd), background processes (list,
    kill, stdin, reconnect after a disconnect), streamed output and the command timeout, which
    kills a background command whose client went away (as E2B's does: before the fix it ran on)."""
    d, env, run = e2b
    out = run("commands.mjs")
    assert out["run"] == {"exitCode": 0, "stdout": "hi\nyes\n", "stderr": "err\n"}, out
    assert out["exit"]["name"] == "CommandExitError" and out["exit"]["exitCode"] == 3, out
    assert out["envcwd"] == "y\n/tmp\n", out
    assert {"pid": out["bgPid"], "cmd": "/bin/bash", "args": ["-l", "-c", "sleep 60"]} in out["list"], out
    assert out["killed"] is True and out["killedAgain"] is False, out  # the second after its end
    assert out["killedEnd"]["name"] == "CommandExitError" and out["killedEnd"]["exitCode"] == -1, out
    assert out["stdin"] == "abcde\n", out
    assert "".join(out["chunks"]) == "1\n2\n3\n" and len(out["chunks"]) >= 2, out  # as it came, not at the end
    assert out["timeout"]["name"] == "TimeoutError", out
    assert out["reconnect"] == "done\n", out
    assert out["deadlineKept"] is False, out  # its timeoutMs kills it though its client left
    assert out["connectGone"]["name"] == "NotFoundError", out
    assert out["sendToGone"]["name"] == "NotFoundError", out
    # a terminal: resized, typed into, its output as one stream, its exit status
    assert "30 100" in out["pty"], out
    assert out["ptyExit"]["name"] == "CommandExitError" and out["ptyExit"]["exitCode"] == 4, out


def test_e2bs_default_user(e2b):
    """E2B's default user: in a sandbox of the base template, commands and file operations run as
    `user` (uid 1000, home /home/user, its own), and as root only when a call names it, so a file
    the SDK writes is the user's to change and a root-only path is refused as on E2B. Before the
    change every call ran as the sandbox's root: `whoami` said root, and mine.txt was root's, so
    the user could not append to it."""
    d, env, run = e2b
    out = run("user.mjs")
    assert out["who"] == "user\n1000\n1000\n/home/user\n/home/user\nuser:user\n", out
    assert out["root"] == "root\n/root\n", out
    assert out["mine"] == "user:user:644\nby the SDKmore\n", out
    assert out["mkdir"] is True and out["dirs"] == "user:user\nuser:user\n", out
    # EntryInfo's owner and group: the names in the sandbox's /etc/passwd and /etc/group, else the number
    assert out["info"] == ["user", "user"], out
    assert sorted(out["listed"]) == [["home", "root", "root"], ["root", "root", "root"], ["tmp", "root", "root"]], out
    assert out["moved"] == ["c", "user", "user"], out
    assert out["numeric"] == ["4321", "root"], out  # gid 0: a uid without an entry (Docker's rule)
    assert out["multi"] == "user\nuser\nuser\n", out
    # as the user, a root-owned directory is not writable nor /root readable: E2B's errors
    assert out["etc"] and "ermission" in out["etc"]["message"], out
    assert out["rootHome"] and "ermission" in out["rootHome"]["message"], out
    assert out["rootWrite"] == "root\n", out  # user: 'root' names root
    assert out["rootRead"] and "ermission" in out["rootRead"]["message"], out
    assert out["rootReadAsRoot"] == "root", out
    assert out["unknown"] and "nosuchuser" in out["unknown"]["message"], out
    assert out["unknownCmd"] and "nosuchuser" in out["unknownCmd"]["message"], out


def test_a_violation_through_e2b_counts(e2b):
    """What an agent does through E2B's calls is the sandbox's, counted as any other: a mount
    attempt is a syscall violation in cordon's /violations and events."""
    d, env, run = e2b
    out = run("violation.mjs")
    assert out["exitCode"] != 0, out
    sb = Sandbox.connect(out["id"], endpoint=d.endpoint)
    v = sb.violations()
    assert v["counts"]["syscall"] >= 1, v
    assert any(e["type"] == "violation" and e["kind"] == "syscall" for e in sb.events()), sb.events()
    assert any(e["type"] == "exec" and e.get("background") for e in sb.events())
    sb.kill()


def test_files(e2b):
    """files: text and bytes, one file or many (multipart), octet-stream, gzip'd and streamed
    uploads, list (and deeper), exists, getInfo (a symlink's target too), makeDir, rename, remove,
    watchDir (flat and recursive), and E2B's errors for what is not there. Relative paths are the
    home's, /home/user, where commands start too."""
    d, env, run = e2b
    out = run("files.mjs")
    assert out["pwd"] == "/home/user", out
    assert out["write"] == {"name": "hello.txt", "type": "file", "path": "/home/user/hello.txt"}, out
    assert out["read"] == "hi there" and out["readByShell"] == "hi there\nhi there", out
    assert out["bytes"] == [0, 1, 2, 250, 255, 10], out
    assert out["empty"]["path"] == "/tmp/empty" and out["emptyRead"] == "", out
    assert [w["path"] for w in out["multi"]] == ["/tmp/m/a.txt", "/home/user/sub/b.txt", '/tmp/m/c "q".txt'], out
    assert out["multiRead"] == "ABBC", out
    assert out["octet"]["path"] == "/tmp/o.txt" and out["gzip"]["path"] == "/tmp/g.txt", out
    assert out["gzipRead"] == 7000 and out["streamRead"] == "streamed", out
    assert {"name": "a.txt", "type": "file", "path": "/tmp/m/a.txt", "size": 1} in out["list"], out
    assert out["listDeep"] == ["/tmp/m/a.txt", '/tmp/m/c "q".txt', "/tmp/m/d", "/tmp/m/d/e",
                               "/tmp/m/d/e/deep.txt"], out
    assert out["listFile"]["name"] == "InvalidArgumentError", out
    assert out["listMissing"]["name"] == "FileNotFoundError", out
    assert out["exists"] is True and out["existsNot"] is False, out
    info = out["info"]
    assert info["name"] == "a.txt" and info["type"] == "file" and info["size"] == 1, out
    assert info["permissions"] == "-rw-r--r--" and info["mode"] == 0o644 and 0 <= info["mtimeAge"] < 120_000, out
    assert out["link"] == {"type": "symlink", "target": "/tmp/m/a.txt"}, out
    assert out["made"] is True and out["madeAgain"] is False, out
    assert out["makeOnFile"]["name"] == "InvalidArgumentError", out
    assert out["moved"] == {"name": "a2.txt", "path": "/tmp/moved/a2.txt", "type": "file"}, out
    assert out["movedOld"] is False and out["removed"] is False and out["removeMissing"] is None, out
    assert out["readMissing"]["name"] == "FileNotFoundError", out
    assert out["readDir"]["name"] == "InvalidArgumentError", out
    assert out["metadata"] and "not supported" in out["metadata"]["message"], out
    ev = [(e["name"], e["type"]) for e in out["events"]]
    for want in [("new.txt", "create"), ("new.txt", "write"), ("sub", "create"), ("new.txt", "rename"),
                 ("renamed.txt", "create"), ("renamed.txt", "chmod"), ("renamed.txt", "remove")]:
        assert want in ev, (want, ev)
    assert ("sub/inner.txt", "create") in [(e["name"], e["type"]) for e in out["recursive"]], out
    assert out["watchMissing"]["name"] in ("FileNotFoundError", "NotFoundError"), out


def test_a_symlink_into_a_protected_path_through_e2b_files_counts(e2b, shared_dir):
    """An agent's symlinks into the sandbox's protected paths, followed by E2B's files calls: each
    refused and counted as a protect violation of that sandbox, as through /v1; the operator's own
    read of the protected file is not one. (Before E2B's files were a view of /v1's, the read of
    /workspace/result.txt was not routed through the checks at all: 501.)"""
    d, env, run = e2b
    ws = pathlib.Path(shared_dir) / "ws"
    (ws / "tests").mkdir(parents=True)
    (ws / "answer.key").write_text("the-secret-42")
    (ws / "tests" / "test_hidden.py").write_text("hidden\n")
    os.chmod(ws, 0o777)
    sb = Sandbox.create(endpoint=d.endpoint, mounts=[{"source": str(ws), "target": "/workspace"}],
                        protect=["/workspace/answer.key", "/workspace/tests/**"])
    try:
        r = sb.exec("ln -s /workspace/answer.key /workspace/result.txt && ln -s /workspace/tests /workspace/t && "
                    "ln -s /workspace/tests/new.py /workspace/out.py")
        assert r.exit_code == 0, r
        out = run("protect.mjs", SANDBOX_ID=sb.id)
        for op in ("read", "write", "list", "info"):
            assert out[op] is not None and "symlink" in out[op]["message"], (op, out)
            assert "the-secret-42" not in out[op]["message"], (op, out)
        assert out["direct"] == "the-secret-42", out
        ev = [e for e in sb.events() if e["type"] == "violation" and e["kind"] == "protect"]
        assert [e["op"] for e in ev] == ["read", "write", "stat", "stat"], ev  # ListDir looks at its path first
        assert sb.violations()["counts"]["protect"] == 4, sb.violations()
        assert (ws / "tests" / "test_hidden.py").read_text() == "hidden\n"
        assert not (ws / "tests" / "new.py").exists()
    finally:
        sb.kill()


def test_bad_envd_files_requests_get_clear_errors(e2b):
    """Malformed files requests: each answered with E2B's error shape naming what is wrong, and the
    sandbox still serves the next one."""
    d, env, run = e2b
    import gzip
    sb = Sandbox.create(endpoint=d.endpoint)
    try:
        def call(method, path, body=b"", headers=None):
            return envd_call(env, sb.id, method, path, body, headers)

        rpc = {"Content-Type": "application/json"}
        mp = {"Content-Type": "multipart/form-data; boundary=B"}
        envelope = lambda o: bytes([0]) + len(o).to_bytes(4, "big") + o  # noqa: E731
        for method, path, body, headers, status, needle in [
            ("GET", "/files", b"", {}, 400, "path: required"),
            ("GET", "/files?path=/etc/hostname&x=1", b"", {}, 400, "x: unknown parameter"),
            ("POST", "/files", b"data", {"Content-Type": "application/octet-stream"}, 400, "path: required"),
            ("POST", "/files?path=/tmp/a", b"not gzip", {"Content-Type": "application/octet-stream",
                                                        "Content-Encoding": "gzip"}, 400, "not gzip"),
            ("POST", "/files?path=/tmp/a", b"x", {"Content-Encoding": "br"}, 400, "Content-Encoding"),
            ("POST", "/files", b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/tmp/a\"\r\n\r\nx",
             mp, 400, "no closing boundary"),
            ("POST", "/files", b"--B\r\nContent-Type: text/plain\r\n\r\nx\r\n--B--", mp, 400, "no Content-Disposition"),
            ("POST", "/files", b"--B\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx\r\n--B--", mp, 400,
             "no filename"),
            ("POST", "/files", b"--B--", mp, 400, "no file"),
            ("POST", "/files", b"x", {"Content-Type": "multipart/form-data"}, 400, "boundary"),
            ("POST", "/files?path=/tmp/a", b"--B\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a\"\r\n\r\n"
             b"x\r\n--B\r\nContent-Disposition: form-data; name=\"f\"; filename=\"b\"\r\n\r\ny\r\n--B--", mp, 400,
             "more than one file"),
            ("POST", "/files?path=/" + "a" * 5000, b"x", {}, 400, "longer than"),
            ("POST", "/filesystem.Filesystem/Stat", b"{", rpc, 400, "expected a JSON object"),
            ("POST", "/filesystem.Filesystem/Stat", b'{"path": 7}', rpc, 400, "path: expected a path"),
            ("POST", "/filesystem.Filesystem/Move", b'{"source": "/tmp"}', rpc, 400, "destination"),
            ("POST", "/filesystem.Filesystem/ListDir", b'{"path": "/", "depth": 99}', rpc, 400, "depth"),
            ("POST", "/filesystem.Filesystem/Nope", b"{}", rpc, 404, "no such method"),
            ("POST", "/filesystem.Filesystem/CreateWatcher", b"{}", rpc, 404, "use WatchDir"),
            ("GET", "/filesystem.Filesystem/Stat", b"", {}, 405, "POST"),
        ]:
            st, data = call(method, path, body, headers)
            err = json.loads(data)
            assert st == status and needle in err["message"], (path, body, st, err)
            assert isinstance(err["code"], int if path.split("?")[0] == "/files" else str), err
        # a stream's errors come as its end: a bad envelope, an unknown option, a missing directory
        for body, code, needle in [(b"\x00\x00\x00\x00\x09{}", "invalid_argument", "envelope"),
                                   (envelope(b'{"path": "/tmp", "includeEntry": true}'), "invalid_argument",
                                    "includeEntry"),
                                   (envelope(b'{"path": "/nowhere"}'), "not_found", "nowhere")]:
            st, data = call("POST", "/filesystem.Filesystem/WatchDir", body,
                            {"Content-Type": "application/connect+json"})
            assert st == 200 and data[0] == 2, (body, st, data)
            end = json.loads(data[5:])
            assert end["error"]["code"] == code and needle in end["error"]["message"], (body, end)
        # still serving: a gzip'd upload reads back
        st, data = call("POST", "/files?path=/tmp/z.txt", gzip.compress(b"ok" * 10),
                        {"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"})
        assert st == 200 and json.loads(data) == [{"name": "z.txt", "type": "file", "path": "/tmp/z.txt"}], data
        assert call("GET", "/files?path=/tmp/z.txt") == (200, b"ok" * 10)
    finally:
        sb.kill()


def write_spec(shared_dir, name, spec):
    path = os.path.join(shared_dir, name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def test_a_templates_allowlist_holds_and_its_refusals_count(shared_dir, net):
    """A template of cordond's configuration names the network allowlist and limits; an E2B script
    creating it by name gets them: the allowed name answers, the other is refused, and the refusal is
    an egress violation in that sandbox's /violations and events."""
    import fakenet
    spec = write_spec(shared_dir, "web", {"network": {"mode": "allowlist", "allow": ["pypi.test:80"]},
                                          "limits": {"memory_mb": 384, "cpus": 1}})
    d, env, run = start(shared_dir, "--dns-upstream", fakenet.DNS_IP, "--e2b-template", f"web:{spec}")
    try:
        out = run("template.mjs", TEMPLATE="web", NET="1", KEEP="1")
        assert out["info"] == {"templateId": "web", "cpuCount": 1, "memoryMB": 384}, out
        assert out["home"]["stdout"] == "/workspace\n/workspace\n", out  # a template's spec: its own workdir
        assert out["allowed"]["exitCode"] == 0 and "host=pypi.test" in out["allowed"]["stdout"], out
        assert out["refused"]["exitCode"] == 6, out  # the name is not resolved
        sb = Sandbox.connect(out["id"], endpoint=d.endpoint)
        assert sb.info()["spec"]["labels"]["e2b.template"] == "web"
        assert sb.violations()["counts"]["egress"] >= 1, sb.violations()
        refusals = [e for e in sb.events() if e["type"] == "egress" and e["decision"] == "deny"]
        assert refusals and all(e["name"] == "evil.test" for e in refusals), refusals
        sb.kill()
        st, body = d.http("POST", "/v2/sandboxes", {"templateID": "nope"})
        assert st == 400 and "'web', 'base'" in body["message"], body
    finally:
        assert d.stop() == 0, d.output()


def test_a_bad_template_stops_cordond_at_start(shared_dir):
    import cordonlib
    bad = write_spec(shared_dir, "bad", {"tier": "nope"})
    for arg, needle in [(f"x:{bad}", "e2b_template 'x'"), ("no-colon", "NAME:SPECFILE"),
                        (f"bad/name:{bad}", "NAME:SPECFILE"), ("y:/nonexistent.json", "/nonexistent.json")]:
        p = subprocess.run([cordonlib.CORDOND_BIN, "--config", "/dev/null", "--socket",
                            os.path.join(shared_dir, "t.sock"), "--e2b-template", arg],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and needle in p.stderr, (arg, p.returncode, p.stderr)


@pytest.mark.needs_vm
def test_a_microvm_template(shared_dir):
    """The same calls on tier microvm, through a template naming it: create, commands, files, kill;
    as E2B's user, which the template names: the guest's init takes the user on for file operations
    as a container's does (without that the file was root's and /root writable through files)."""
    spec = write_spec(shared_dir, "micro", {"tier": "microvm", "workdir": "/home/user", "user": "user"})
    d, env, run = start(shared_dir, "--e2b-template", f"micro:{spec}")
    try:
        out = run("template.mjs", TEMPLATE="micro", FILES="1")
        assert out["info"]["templateId"] == "micro", out
        assert out["home"]["stdout"] == "/home/user\n/home/user\n", out
        assert out["uname"]["exitCode"] == 0 and out["uname"]["stdout"] != os.uname().release + "\n", out  # its own kernel
        assert out["read"] == "in the guest" and out["cat"]["stdout"] == "in the guest", out
        assert out["list"] == ["/home/user/notes/a.txt"], out
        assert out["owner"]["stdout"] == "user\nuser\nuser\nuser\n", out
        assert out["entry"] == ["user", "user"], out
        assert "ermission" in out["rootDir"], out
        assert out["killed"] is True, out
        st, body = d.http("GET", "/v1/sandboxes")
        assert body["sandboxes"] == [], body
    finally:
        assert d.stop() == 0, d.output()


def test_a_template_with_a_warm_pool_is_handed_over(shared_dir):
    """A pool of the template's spec file: the E2B create is a hand-over from it (its event log says
    so), with the create's envVars and HOME applied to its commands."""
    spec = write_spec(shared_dir, "pooled", {"workdir": "/home/user", "limits": {"memory_mb": 300}})
    d, env, run = start(shared_dir, "--pool", f"1:{spec}", "--e2b-template", f"pooled:{spec}")
    try:
        import time
        deadline = time.time() + 60
        while time.time() < deadline and "cordon_pool_size 1" not in d.http("GET", "/metrics")[1].decode():
            time.sleep(0.2)
        out = run("template.mjs", TEMPLATE="pooled", KEEP="1")
        assert out["home"]["stdout"] == "/home/user\n/home/user\n", out
        sb = Sandbox.connect(out["id"], endpoint=d.endpoint)
        assert any(e["type"] == "handed_over" for e in sb.events()), sb.events()
        sb.kill()
    finally:
        assert d.stop() == 0, d.output()


def test_review_findings_on_files(e2b):
    """What a review found (it triggered each; the first and the 413 below were seen failing here
    before their fix): a gzip'd upload of a .gz file was
    unpacked twice (libarchive's raw reader stacks filters) and an empty gzip'd one refused; ListDir
    deeper than 1 failed on a directory whose name is not UTF-8 (the next level's path was built from
    the lossy name); a multipart filename with a backslash lost it; a read over max_read came back
    507 (disk full) instead of 413; a path given twice was first-wins."""
    d, env, run = e2b
    import gzip
    sb = Sandbox.create(endpoint=d.endpoint)
    try:
        def call(method, path, body=b"", headers=None):
            return envd_call(env, sb.id, method, path, body, headers)

        gz = {"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"}
        inner = gzip.compress(b"hello")
        assert call("POST", "/files?path=/tmp/x.gz", gzip.compress(inner), gz)[0] == 200
        assert call("GET", "/files?path=/tmp/x.gz") == (200, inner)
        assert call("POST", "/files?path=/tmp/e", gzip.compress(b""), gz)[0] == 200
        assert call("GET", "/files?path=/tmp/e") == (200, b"")
        two = gzip.compress(b"ab") + gzip.compress(b"cd")  # two members, as `gzip a b` makes
        assert call("POST", "/files?path=/tmp/two", two, gz)[0] == 200
        assert call("GET", "/files?path=/tmp/two") == (200, b"abcd")
        st, data = call("POST", "/files?path=/tmp/t", gzip.compress(b"x" * 100)[:-10], gz)
        assert st == 400 and "ends before" in json.loads(data)["message"], data
        assert sb.exec(["sh", "-c", "mkdir -p /tmp/l/$(printf 'bad\\377')/in && touch /tmp/l/$(printf 'bad\\377')/in/f"]).exit_code == 0
        st, data = call("POST", "/filesystem.Filesystem/ListDir", b'{"path": "/tmp/l", "depth": 3}',
                        {"Content-Type": "application/json"})
        assert st == 200, data
        names = sorted(e["path"] for e in json.loads(data)["entries"])
        assert names == ["/tmp/l/bad\ufffd", "/tmp/l/bad\ufffd/in", "/tmp/l/bad\ufffd/in/f"], names
        body = (b'--B\r\nContent-Disposition: form-data; name="file"; filename="/tmp/a\\b%22c"\r\n\r\nz\r\n--B--')
        st, data = call("POST", "/files", body, {"Content-Type": "multipart/form-data; boundary=B"})
        assert st == 200 and json.loads(data)[0]["path"] == '/tmp/a\\b"c', data
        assert sb.exec(["cat", '/tmp/a\\b"c']).stdout == "z"
        st, data = call("GET", "/files?path=/tmp/a&path=/tmp/b")
        assert st == 400 and "given twice" in json.loads(data)["message"], data
    finally:
        sb.kill()


def test_a_read_over_max_read_is_413(shared_dir):
    d, env, run = start(shared_dir, "--max-read", "1M")
    sb = Sandbox.create(endpoint=d.endpoint)
    try:
        assert sb.exec(["sh", "-c", "head -c 2000000 /dev/zero > /tmp/big"]).exit_code == 0
        st, data = envd_call(env, sb.id, "GET", "/files?path=/tmp/big")
        err = json.loads(data)
        assert st == 413 and err["code"] == 413, err
    finally:
        sb.kill()
        assert d.stop() == 0, d.output()


def test_pause_and_resume(e2b):
    """sbx.pause() freezes the sandbox (true, then false: paused already); it lists as paused, is not
    running, and refuses commands; Sandbox.connect resumes it with the timeout given, and what ran
    before runs on."""
    d, env, run = e2b
    out = run("pause.mjs")
    assert out["paused"] is True and out["pausedAgain"] is False, out
    assert out["state"] == "paused" and out["listedRunning"] == 0 and len(out["listedPaused"]) == 1, out
    assert out["isRunning"] is False, out
    assert out["runWhilePaused"] is not None, out
    assert out["frozen"] <= 6 and out["after"] >= 5, out  # 2 s paused: nothing counted; then it runs
    assert 100 <= out["endsIn"] <= 121, out
    assert out["killed"] is True, out
    assert out["pauseGone"]["name"] == "SandboxNotFoundError", out


def test_expiry_and_a_second_client(e2b):
    """A second process connects by id alone and works in the sandbox the first made; the sandbox
    ends when its timeoutMs is up: not running, commands fail, kill says false, connect finds none."""
    d, env, run = e2b
    out = run("expiry.mjs")
    assert out["second"] == {"id": out["id"], "stdout": "first seen", "listed": True}, out
    assert out["runningBefore"] is True and out["runningAfter"] is False, out
    assert out["runAfter"] is not None, out
    assert out["killAfter"] is False, out
    assert out["connectAfter"]["name"] == "SandboxNotFoundError", out
    st, body = d.http("GET", f"/v1/sandboxes/{out['id']}")
    assert st == 404 or "lifetime" in body.get("exit_reason", ""), body
