"""cordond's image API (issue 20 point 7): POST /v1/images/pull (plain and NDJSON), GET /v1/images,
GET|DELETE /v1/images/{ref}, POST /v1/images/prune, creates that pull their image (spec "pull"),
/metrics, the registry options, and the SDK's cordon.images.

Each test runs its own cordond on a state directory of its own (its own image store) against a
docker-registry of the test's own on loopback; the images are built by the tests (registry.py).
The autouse leak check covers the sandboxes; each test also checks that no pull child of its
cordond is left and that the store holds no half-done work."""

import asyncio
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse

import pytest

import cordonlib
from cordon import ImageInUse, InvalidArgument, NotFound, Sandbox, images
from registry import Layer
from test_images import CONFIG, busybox_layer, task_layers


def q(ref):
    return "/v1/images/" + urllib.parse.quote(ref, safe="")


class ImageDaemon(cordonlib.Daemon):
    """A cordond with a state directory (and so an image store) of its own."""

    def __init__(self, workdir, *args, state=None):
        # below the test's 0777 directory: a sandbox's root (an unprivileged host uid) must reach
        # the state directory's prepared /dev
        self.state = state or tempfile.mkdtemp(prefix="state-", dir=workdir)
        os.chmod(self.state, 0o755)
        super().__init__(workdir, "--state-dir", self.state, *args)

    @property
    def store(self):
        return os.path.join(self.state, "images", "store")

    def pull_children(self, prefix="cordond-"):
        """Its image children that run: "cordond-pull" (a pull), "cordond-store" (prune, size)."""
        return [p for p in cordonlib.all_procs() if p.ppid == self.proc.pid and p.comm.startswith(prefix)
                and p.state != "Z"]

    def metric(self, name):
        st, text = self.http("GET", "/metrics")
        assert st == 200
        for line in text.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return None

    def stop(self, timeout=30):
        code = super().stop(timeout)
        shutil.rmtree(self.state, ignore_errors=True)
        return code


@pytest.fixture
def images_env(shared_dir, registry_factory, oci_layout):
    """(daemon, registry, push): a registry and a cordond that may pull from it over plain HTTP
    (--insecure-registries); push(layers, name, tag, config) → the image's reference."""
    reg = registry_factory()
    made = []

    def push(layers, name, tag="1", config=CONFIG):
        lay = oci_layout()
        lay.tag(lay.new_image(layers, compression="gzip", config=config), tag)
        reg.push(lay.path, tag, name)
        return f"{reg.host}/{name}:{tag}"

    def start(*args, state=None):
        d = ImageDaemon(shared_dir, "--insecure-registries", reg.host, *args, state=state)
        made.append(d)
        return d

    yield start, reg, push
    for d in made:
        children = d.pull_children() if d.proc.poll() is None else []
        tmp = os.path.join(d.store, "tmp")
        leftovers = os.listdir(tmp) if os.path.isdir(tmp) else []
        code = d.stop()
        assert code == 0, f"cordond exited {code}:\n{d.output()}"
        # a child still at work (the size of the store measured at start) ends with cordond
        cordonlib.wait_for(lambda: all((p := cordonlib.proc_info(c.pid)) is None or p.state == "Z"
                                       or p.start != c.start for c in children),
                           timeout=10, what=f"the image children's end: {children}")
        assert not [c for c in children if c.comm == "cordond-pull"], f"pulls still running at the end: {children}"
        assert not leftovers, f"half-done work in the store: {leftovers}"


def unique_layer():
    return Layer().file("etc/unique-" + os.urandom(6).hex(), os.urandom(64 * 1024))


def stream_pull(d, ref):
    """A streamed pull, its lines parsed (each must be one JSON object)."""
    import http.client
    import socket

    class Conn(http.client.HTTPConnection):
        def connect(conn):
            conn.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.sock.settimeout(120)
            conn.sock.connect(d.socket)

    c = Conn("cordond")
    c.request("POST", "/v1/images/pull", body=json.dumps({"ref": ref, "stream": True}))
    r = c.getresponse()
    assert r.status == 200 and r.getheader("Content-Type") == "application/x-ndjson"
    lines = [json.loads(x) for x in r.read().splitlines() if x.strip()]
    c.close()
    return lines


def test_pull_plain_and_streamed_then_list_and_get(images_env):
    start, reg, push = images_env
    ref1 = push(task_layers(), "team/task", "1")
    ref2 = push([busybox_layer(), unique_layer()], "team/other", "2")
    d = start()
    st, body = d.http("POST", "/v1/images/pull", {"ref": ref1})
    assert st == 200, body
    assert body["status"] == "done" and body["ref"] == ref1 and body["layers"] == 2, body
    assert body["digest"].startswith("sha256:") and body["size"] > 0 and body["bytes_pulled"] > 0, body

    lines = stream_pull(d, ref2)
    assert lines[0]["status"] == "resolved" and lines[0]["layers"] == 2, lines[0]
    last = lines[-1]
    assert last["status"] == "done" and last["digest"] == lines[0]["digest"] and last["ref"] == ref2, last
    progress = [x for x in lines[1:-1]]
    assert progress and all(x["status"] in ("fetch", "cached", "unpacked") for x in progress), progress
    for x in progress:  # every progress line names its layer's blob and counts its bytes
        assert x["digest"].startswith("sha256:") and 0 <= x["done"] <= x["total"], x
    assert sum(x["status"] in ("unpacked", "cached") for x in progress) == 2, progress

    st, body = d.http("GET", "/v1/images")
    assert st == 200
    by_ref = {r: img for img in body["images"] for r in img["refs"]}
    assert set(by_ref) == {ref1, ref2}, body
    assert by_ref[ref2]["digest"] == last["digest"] and by_ref[ref1]["created"] > 0, body
    st, info = d.http("GET", q(ref1))
    assert st == 200, info
    assert info["ref"] == ref1 and len(info["layers"]) == 2 and info["in_use"] == 0, info
    assert info["config"]["WorkingDir"] == "/testbed" and info["config"]["Cmd"] == CONFIG["Cmd"], info
    st, err = d.http("GET", q(f"{reg.host}/team/none:1"))
    assert st == 404 and err["error"]["field"] == "ref", err

    assert d.metric('cordon_image_pulls_total{result="done"}') == 2
    assert d.metric("cordon_image_pull_bytes_total") > 0
    cordonlib.wait_for(lambda: (d.metric("cordon_image_store_bytes") or 0) > 0, timeout=10,
                       what="the store's size in /metrics")


@pytest.mark.parametrize("body, field", [
    ({"ref": "team/Task:1"}, "ref"),  # a repository is lowercase
    ({"ref": ""}, "ref"),
    ({}, "ref"),
    ({"ref": 7}, "ref"),
    ({"ref": "host"}, "ref"),  # not an OCI reference
    ({"ref": "busybox:1", "stream": "yes"}, "stream"),
    ({"ref": "busybox:1", "policy": "always"}, "policy"),
    ("not json", "body"),
])
def test_bad_pull_requests_are_400_naming_the_field(images_env, body, field):
    start, _, _ = images_env
    d = start()
    st, err = d.http("POST", "/v1/images/pull", body if isinstance(body, dict) else body.encode())
    assert st == 400 and err["error"]["field"] == field, (st, err)
    st, err = d.http("GET", q("team/Task:1"))
    assert st == 400 and err["error"]["field"] == "ref", err
    st, err = d.http("DELETE", q(":::"))
    assert st == 400 and err["error"]["field"] == "ref", err


def test_a_failed_pull_says_why(images_env):
    start, reg, _ = images_env
    d = start()
    st, err = d.http("POST", "/v1/images/pull", {"ref": f"{reg.host}/nothing/here:1"})
    assert st in (404, 502) and err["error"]["field"] == "ref" and "nothing" in err["error"]["message"], err
    lines = stream_pull(d, f"{reg.host}/nothing/here:1")
    assert lines[-1]["status"] == "error" and lines[-1]["error"]["field"] == "ref", lines
    assert d.metric('cordon_image_pulls_total{result="failed"}') == 2


def test_create_from_a_pulled_image_and_exec(images_env):
    start, _, push = images_env
    ref = push(task_layers(), "team/task", "1")
    d = start()
    assert d.http("POST", "/v1/images/pull", {"ref": ref})[0] == 200
    with Sandbox.create(endpoint=d.endpoint, image=ref, pull="never") as sb:
        r = sb.exec(["sh", "-c", "cat /testbed/README; pwd; echo $FROM_IMAGE; stat -c %u /home/dev/notes"])
        assert (r.exit_code, r.stdout) == (0, "hello\n/testbed\nyes\n1000\n"), r  # the image's config applies
        assert sb.info()["image_digest"].startswith("sha256:")
    # the spec's workdir wins over the image's WorkingDir
    with Sandbox.create(endpoint=d.endpoint, image=ref, workdir="/tmp") as sb:
        assert sb.exec(["pwd"]).stdout == "/tmp\n"


def test_a_create_pulls_a_missing_image(images_env):
    start, reg, push = images_env
    ref = push([busybox_layer(), unique_layer()], "team/lazy", "3")
    d = start()
    st, err = d.http("POST", "/v1/sandboxes", {"image": ref, "pull": "never"})
    assert st == 400 and err["error"]["field"] == "image" and "never" in err["error"]["message"], err
    st, err = d.http("POST", "/v1/sandboxes", {"image": ref, "pull": "sometimes"})
    assert st == 400 and err["error"]["field"] == "pull", err
    st, err = d.http("POST", "/v1/sandboxes", {"image": "host", "pull": "always"})
    assert st == 400 and err["error"]["field"] == "pull", err
    st, err = d.http("POST", "/v1/sandboxes", {"image": f"{reg.host}/nothing/here:1"})
    assert st in (400, 500) and err["error"]["field"] == "image" and "nothing" in err["error"]["message"], err
    assert d.http("GET", q(ref))[0] == 404
    with Sandbox.create(endpoint=d.endpoint, image=ref) as sb:  # pull: "missing", the default
        assert sb.exec(["cat", "/etc/passwd"]).stdout.startswith("root:")
    assert d.http("GET", q(ref))[0] == 200
    assert d.metric('cordon_image_pulls_total{result="done"}') == 1
    with Sandbox.create(endpoint=d.endpoint, image=ref, pull="always") as sb:
        assert sb.exec(["true"]).exit_code == 0
    assert d.metric('cordon_image_pulls_total{result="done"}') == 2


def test_delete_of_an_image_in_use_is_409_then_works(images_env):
    start, _, push = images_env
    ref = push([busybox_layer(), unique_layer()], "team/used", "1")
    d = start()
    assert d.http("POST", "/v1/images/pull", {"ref": ref})[0] == 200
    sb = Sandbox.create(endpoint=d.endpoint, image=ref)
    try:
        st, err = d.http("DELETE", q(ref))
        # What this catches: removing the image (and then pruning its layers) under a running sandbox.
        assert st == 409 and err["error"]["code"] == "image_in_use" and sb.id in err["error"]["message"], err
        assert d.http("GET", q(ref))[1]["in_use"] == 1
        st, pr = d.http("POST", "/v1/images/prune")
        assert st == 200, pr
        assert sb.exec(["cat", "/etc/passwd"]).exit_code == 0  # its layers are still there
    finally:
        sb.kill()
    # At once: the delete's answer comes after the kill, and a killed sandbox holds nothing (its
    # teardown may still run). Caught (with the hold kept until the teardown's end): 409 here.
    st = d.http("DELETE", q(ref))
    assert st[0] == 200 and st[1]["image_removed"] is True, st
    assert d.http("GET", q(ref))[0] == 404
    assert d.http("DELETE", q(ref))[0] == 404


def test_an_ended_sandbox_kept_for_its_retention_holds_no_image(images_env):
    """A sandbox past its lifetime is kept (410, its events) for the retention, but runs nothing: its
    image can go. Caught (review of the retention): the record kept the image's hold and was counted
    as a user, so the DELETE answered 409 for the whole retention."""
    start, _, push = images_env
    ref = push([busybox_layer(), unique_layer()], "team/ended", "1")
    d = start()
    sb = Sandbox.create(endpoint=d.endpoint, image=ref, timeout_s=1)
    cordonlib.wait_for(lambda: "ended_at" in sb.info(), timeout=30, what="the end of its lifetime")
    assert d.http("GET", q(ref))[1]["in_use"] == 0
    st = d.http("DELETE", q(ref))
    assert st[0] == 200 and st[1]["image_removed"] is True, st
    assert sb.info()["state"] == "exited"  # its record stays
    sb.kill()


def test_an_image_in_use_outside_cordonds_list_is_not_removed(images_env, shared_dir):
    """A sandbox of `cordon run` on the same store, and a warm pool's sandboxes, hold their image: the
    API's DELETE is 409 and `cordon image rm` refuses (125) until they are gone. What this catches:
    without the holds, cordond knows only the sandboxes it lists, the CLI none at all, and either
    removes the record (a prune then frees the layers) under a running root."""
    start, reg, push = images_env
    ref = push([busybox_layer(), unique_layer()], "team/held", "1")
    d = start()
    assert d.http("POST", "/v1/images/pull", {"ref": ref})[0] == 200
    env = {**os.environ, "CORDON_STATE_DIR": d.state}
    with cordonlib.Running(["--image", ref, "--", "sh", "-c", "echo up; sleep 60"], env=env) as run:
        assert run.proc.stdout.readline() == "up\n"
        st, err = d.http("DELETE", q(ref))
        assert st == 409 and err["error"]["code"] == "image_in_use", err
        assert "in use by a running sandbox" in err["error"]["message"], err
        r = subprocess.run([cordonlib.CORDON_BIN, "image", "rm", ref], capture_output=True, text=True, env=env)
        assert r.returncode == 125 and "in use by a running sandbox" in r.stderr, r
        assert d.http("GET", q(ref))[0] == 200
    assert d.stop() == 0
    # a warm pool of the image (in the store before its cordond starts): its sandboxes are no
    # one's yet, and still hold it
    state = tempfile.mkdtemp(prefix="state-", dir=shared_dir)
    env = {**os.environ, "CORDON_STATE_DIR": state, "CORDON_INSECURE_REGISTRIES": reg.host}
    r = subprocess.run([cordonlib.CORDON_BIN, "image", "pull", ref], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    spec = os.path.join(shared_dir, "pool-held.json")
    with open(spec, "w") as f:
        json.dump({"image": ref}, f)
    pooled = start("--pool", f"1:{spec}", state=state)
    try:
        cordonlib.wait_for(lambda: pooled.metric("cordon_pool_size") == 1, timeout=60, what="the pool to fill")
    except AssertionError:
        raise AssertionError(pooled.output())
    st, err = pooled.http("DELETE", q(ref))
    assert st == 409 and err["error"]["code"] == "image_in_use", err
    r = subprocess.run([cordonlib.CORDON_BIN, "image", "rm", ref], capture_output=True, text=True, env=env)
    assert r.returncode == 125 and "in use by a running sandbox" in r.stderr, r
    pooled.proc.send_signal(signal.SIGTERM)  # its pool goes with it; the store stays for the rm
    assert pooled.proc.wait(timeout=30) == 0
    r = subprocess.run([cordonlib.CORDON_BIN, "image", "rm", ref], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr


def test_prune_frees_bytes(images_env):
    start, _, push = images_env
    keep = push([busybox_layer()], "team/keep", "1")
    gone = push([busybox_layer(), unique_layer(), unique_layer()], "team/gone", "1")
    d = start()
    for ref in (keep, gone):
        assert d.http("POST", "/v1/images/pull", {"ref": ref})[0] == 200
    st, first = d.http("POST", "/v1/images/prune")
    assert st == 200 and first["freed_bytes"] == 0, first  # everything is referenced
    assert d.http("DELETE", q(gone))[0] == 200
    st, pr = d.http("POST", "/v1/images/prune", {})
    assert st == 200 and pr["freed_bytes"] >= 128 * 1024 and pr["store_size"] < first["store_size"], pr
    assert d.metric("cordon_image_store_bytes") == pr["store_size"]
    with Sandbox.create(endpoint=d.endpoint, image=keep) as sb:  # the shared base layer stayed
        assert sb.exec(["cat", "/etc/passwd"]).exit_code == 0


def test_image_store_max_prunes_after_a_pull(images_env):
    start, _, push = images_env
    a = push([busybox_layer(), unique_layer(), unique_layer()], "team/a", "1")
    b = push([busybox_layer(), unique_layer()], "team/b", "1")
    d = start("--image-store-max", "1")  # every pull is over the cap: it prunes what is unreferenced
    assert d.http("POST", "/v1/images/pull", {"ref": a})[0] == 200
    assert d.http("DELETE", q(a))[0] == 200
    st, body = d.http("POST", "/v1/images/pull", {"ref": b})
    assert st == 200 and body["pruned_bytes"] >= 128 * 1024, body
    assert d.http("GET", q(b))[0] == 200


def test_concurrent_pulls_share_one_and_the_loop_keeps_serving(images_env, fault_proxy):
    start, reg, push = images_env
    lay_ref = push([busybox_layer(), unique_layer()], "team/slow", "1")
    proxy = fault_proxy(reg)
    manifest = reg.inspect("team/slow", "1")
    layer = manifest["Layers"][-1] if "Layers" in manifest else None
    assert layer, manifest
    proxy.stall_once[layer] = (1024, 4)  # the first GET of the layer stalls for 4 s, then is cut
    ref = lay_ref.replace(reg.host, proxy.host)
    d = start("--insecure-registries", proxy.host)
    with Sandbox.create(endpoint=d.endpoint, image="host") as other:
        results = {}

        def streamed():
            results["stream"] = stream_pull(d, ref)

        def plain():
            results["plain"] = d.http("POST", "/v1/images/pull", {"ref": ref})

        t1 = threading.Thread(target=streamed)
        t1.start()
        cordonlib.wait_for(lambda: proxy.blob_requests(layer), timeout=30, what="the layer's first GET")
        t2 = threading.Thread(target=plain)
        t2.start()
        # While the pull stalls, the API answers and a sandbox runs commands (the loop is free).
        t0 = time.monotonic()
        assert d.http("GET", "/v1/health")[0] == 200
        assert other.exec(["true"]).exit_code == 0
        assert time.monotonic() - t0 < 2.0
        assert len(d.pull_children("cordond-pull")) == 1  # one child for both requests
        t1.join(120)
        t2.join(120)
    st, body = results["plain"]
    assert st == 200 and body["digest"] == results["stream"][-1]["digest"], (body, results["stream"][-1])
    assert results["stream"][-1]["status"] == "done"
    manifests = [r for r in proxy.requests if r["method"] == "GET" and "/manifests/" in r["path"]]
    assert len(manifests) == 1, manifests  # the work was done once


def test_sdk_images(images_env):
    start, reg, push = images_env
    ref = push([busybox_layer(), unique_layer()], "team/sdk", "1")
    ref2 = push([busybox_layer(), unique_layer()], "team/sdk-async", "1")
    d = start()
    ep = d.endpoint
    img = images.pull(ref, endpoint=ep)
    assert img["ref"] == ref and img["digest"].startswith("sha256:")
    evs = list(images.pull(ref, stream=True, endpoint=ep))
    assert evs[0]["status"] == "resolved" and evs[-1]["status"] == "done" and evs[-1]["digest"] == img["digest"]
    assert any(ref in i["refs"] for i in images.list(endpoint=ep))
    assert images.get(ref, endpoint=ep)["digest"] == img["digest"]
    with pytest.raises(InvalidArgument) as e:
        images.pull("team/Task:1", endpoint=ep)
    assert e.value.field == "ref"
    with pytest.raises(NotFound):
        list(images.pull(f"{reg.host}/nothing/here:1", stream=True, endpoint=ep))
    with Sandbox.create(endpoint=ep, image=ref) as sb:
        with pytest.raises(ImageInUse):
            images.remove(ref, endpoint=ep)
        sb.kill()
        cordonlib.wait_for(lambda: images.get(ref, endpoint=ep)["in_use"] == 0, timeout=15, what="teardown")
    assert images.remove(ref, endpoint=ep)["image_removed"] is True
    with pytest.raises(NotFound):
        images.get(ref, endpoint=ep)
    assert images.prune(endpoint=ep)["freed_bytes"] > 0

    async def go():
        got = await images.aio.pull(ref2, endpoint=ep)
        evs = [ev async for ev in images.aio.pull(ref2, stream=True, endpoint=ep)]
        assert evs[-1]["digest"] == got["digest"]
        assert any(ref2 in i["refs"] for i in await images.aio.list(endpoint=ep))
        assert (await images.aio.get(ref2, endpoint=ep))["digest"] == got["digest"]
        assert (await images.aio.remove(ref2, endpoint=ep))["deleted"] is True
        assert (await images.aio.prune(endpoint=ep))["freed_bytes"] > 0

    asyncio.run(go())


def test_stop_during_a_pull_leaves_nothing(images_env, fault_proxy):
    start, reg, push = images_env
    ref = push([busybox_layer(), unique_layer()], "team/stopped", "1")
    proxy = fault_proxy(reg)
    layer = reg.inspect("team/stopped", "1")["Layers"][-1]
    proxy.stall_once[layer] = (1024, 20)
    d = start("--insecure-registries", proxy.host)
    result = {}

    def create():
        try:
            result["r"] = d.http("POST", "/v1/sandboxes", {"image": ref.replace(reg.host, proxy.host)})
        except Exception as e:  # noqa: BLE001 (the answer may not leave before cordond does)
            result["r"] = (None, e)

    t = threading.Thread(target=create)
    t.start()
    cordonlib.wait_for(lambda: proxy.blob_requests(layer), timeout=30, what="the layer's first GET")
    kids = d.pull_children("cordond-pull")
    assert len(kids) == 1
    assert d.stop() == 0
    t.join(30)
    assert result["r"][0] in (503, None), result
    cordonlib.wait_for(lambda: not os.path.exists(f"/proc/{kids[0].pid}") or
                       cordonlib.proc_info(kids[0].pid).state == "Z", timeout=10, what="the pull child's end")


def test_a_layout_is_pulled_within_the_bind_policy(images_env, oci_layout):
    start, _, _ = images_env
    lay = oci_layout()
    lay.tag(lay.new_image(task_layers(), compression="gzip", config=CONFIG), "v1")
    ref = f"oci:{lay.path}:v1"
    d = start()
    st, body = d.http("POST", "/v1/images/pull", {"ref": ref})
    assert st == 200 and body["ref"] == ref and body["layers"] == 2, body
    with Sandbox.create(endpoint=d.endpoint, image=ref, pull="never") as sb:
        assert sb.exec(["cat", "/testbed/README"]).stdout == "hello\n"
    # What this catches: a client making cordond import its own state (or any host path the
    # bind policy refuses) as an image, to read it from a sandbox.
    st, err = d.http("POST", "/v1/images/pull", {"ref": f"oci:{d.state}"})
    assert st == 403 and err["error"]["field"] == "ref", err
    st, err = d.http("POST", "/v1/sandboxes", {"image": f"oci:{d.state}"})
    assert st == 400 and err["error"]["field"] == "image", err


def test_bind_allow_limits_layouts(images_env, oci_layout):
    start, _, _ = images_env
    lay = oci_layout()
    lay.tag(lay.new_image([busybox_layer()], config=CONFIG), "v1")
    d = start("--bind-allow", "/usr")
    st, err = d.http("POST", "/v1/images/pull", {"ref": f"oci:{lay.path}:v1"})
    assert st == 403 and err["error"]["field"] == "ref" and "bind" in err["error"]["message"], err
    st, err = d.http("POST", "/v1/sandboxes", {"image": f"oci:{lay.path}:v1"})
    assert st == 400 and err["error"]["field"] == "image", err


def test_cli_create_sends_the_pull_policy(images_env):
    import subprocess
    start, _, push = images_env
    ref = push([busybox_layer(), unique_layer()], "team/cli", "1")
    d = start()

    def cli(*args):
        return subprocess.run([cordonlib.CORDON_BIN, *args], capture_output=True, text=True, timeout=120,
                               env=dict(os.environ, CORDON_SOCKET=d.socket))

    r = cli("create", "--image", ref, "--pull", "never")
    assert r.returncode == cordonlib.EXIT_CORDON and "image" in r.stderr and "never" in r.stderr, r
    r = cli("create", "--image", ref)
    assert r.returncode == 0, r
    sid = r.stdout.strip()
    r = cli("exec", sid, "--", "cat", "/etc/passwd")
    assert r.returncode == 0 and r.stdout.startswith("root:"), r
    assert cli("kill", sid).returncode == 0


def test_cli_create_leaves_the_workdir_to_the_image(images_env):
    """`cordon create --image` without --workdir sends none: the image's WorkingDir applies, as through
    the SDK; --workdir still wins. (It sent the default /workspace, which hid the image's.)"""
    import subprocess
    start, _, push = images_env
    ref = push(task_layers(), "team/cliwd", "1")
    d = start()

    def cli(*args):
        return subprocess.run([cordonlib.CORDON_BIN, *args], capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, CORDON_SOCKET=d.socket))

    for flags, want in (([], "/testbed\n"), (["--workdir", "/tmp"], "/tmp\n")):
        r = cli("create", "--image", ref, *flags)
        assert r.returncode == 0, r
        sid = r.stdout.strip()
        r = cli("exec", sid, "--", "pwd")
        assert (r.returncode, r.stdout) == (0, want), (flags, r)
        assert cli("kill", sid).returncode == 0
