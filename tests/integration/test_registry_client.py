"""cordon's registry client (src/oci/registry.h) against the tests' own registry (registry.py), through
the test-only driver build/tests/lib/oci-fetch: plain HTTP only when listed insecure, TLS with the
test's CA, basic auth and the bearer-token flow with credentials from the auth file, mirrors, a
connection dropped mid-blob (resumed with a Range request), a corrupt blob (refused), and a redirect
to another host (followed without the Authorization header)."""

import base64
import json
import os
import socket
import subprocess
import time

import pytest

import testenv
from registry import MT_INDEX, MT_MANIFEST, Layer, make_ca, sha256_digest

# beside the cordon under test (tests/run-all's sanitizer pass tests the sanitizer build's client)
OCI_FETCH = os.environ.get("CORDON_OCI_FETCH") or os.path.join(os.path.dirname(testenv.CORDON_BIN), "tests", "lib",
                                                               "oci-fetch")

EBADMSG, EACCES, ENOENT, EPROTO, ETIMEDOUT = 74, 13, 2, 71, 110


class Fetch:
    def __init__(self, r):
        self.rc, self.out, self.err = r.returncode, r.stdout, r.stderr
        self.vals = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)

    def __repr__(self):
        return f"oci-fetch exit {self.rc}\nstdout: {self.out}\nstderr: {self.err}"


def oci_fetch(*args, env=None, home=None):
    testenv.need(os.access(OCI_FETCH, os.X_OK), f"no oci-fetch at {OCI_FETCH} (build cordon)")
    # neither the runner's credentials nor its proxies (libcurl would send loopback requests to one)
    drop = {"REGISTRY_AUTH_FILE", "DOCKER_CONFIG", "http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY",
            "HTTPS_PROXY", "ALL_PROXY"}
    e = {k: v for k, v in os.environ.items() if k not in drop}
    e["HOME"] = home or "/nonexistent"  # never the runner's own ~/.docker/config.json
    e.update(env or {})
    return Fetch(subprocess.run([OCI_FETCH, *args], capture_output=True, text=True, timeout=120, env=e))


def auth_file(tmp_path, host, user, password):
    p = tmp_path / "auth.json"
    p.write_text(json.dumps({"auths": {host: {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}}}))
    return str(p)


def push_image(reg, oci_layout, name="test/img", tag="v1", big=False, hello="hello\n"):
    lay = oci_layout()
    files = Layer().dir("etc").file("etc/hello", hello)
    if big:  # 2 MiB that gzip barely shrinks, so a blob large enough to cut mid-way
        files.file("blob.bin", os.urandom(2 << 20))
    amd = lay.new_image([files, Layer().file("etc/second", "2\n")], compression="gzip", arch="amd64")
    arm = lay.new_image([Layer().file("etc/hello", "arm\n")], compression="zstd", arch="arm64")
    idx = lay.add_index([amd, arm])
    lay.tag(amd, tag).tag(idx, tag + "-multi")
    reg.push(lay.path, tag, name)
    reg.push(lay.path, tag + "-multi", name, all=True)
    return amd, idx


def test_plain_http_when_listed_insecure(registry_factory, oci_layout, tmp_path):
    reg = registry_factory()
    amd, idx = push_image(reg, oci_layout)
    f = oci_fetch("--insecure", reg.host, reg.host, "manifest", "test/img", "v1", str(tmp_path / "m"))
    assert f.rc == 0, f
    assert f.vals["digest"] == amd["digest"] and f.vals["media_type"] == MT_MANIFEST
    assert int(f.vals["size"]) == amd["size"] == os.path.getsize(tmp_path / "m")
    f = oci_fetch("--insecure", reg.host, reg.host, "manifest", "test/img", "v1-multi")
    assert f.rc == 0 and f.vals["digest"] == idx["digest"] and f.vals["media_type"] == MT_INDEX, f
    f = oci_fetch("--insecure", reg.host, reg.host, "manifest", "test/img", amd["digest"])
    assert f.rc == 0 and f.vals["digest"] == amd["digest"], f
    layer = amd["layers"][0]
    out = tmp_path / "blob"
    f = oci_fetch("--insecure", reg.host, reg.host, "blob", "test/img", layer["digest"], str(layer["size"]), str(out))
    assert f.rc == 0, f
    assert sha256_digest(out.read_bytes()) == layer["digest"]
    assert f.vals["progress_last"] == f"{layer['size']}/{layer['size']}"

    f = oci_fetch("--insecure", reg.host, reg.host, "manifest", "test/img", "nope")
    assert f.rc == 1 and f"errno={ENOENT}" in f.err, f
    assert f"registry {reg.host}, repository test/img: manifest nope: HTTP 404 (MANIFEST_UNKNOWN" in f.err, f


def test_https_is_required_unless_listed_insecure(registry_factory, oci_layout):
    reg = registry_factory()
    push_image(reg, oci_layout)
    gets = reg.log().count('"GET /v2/')
    f = oci_fetch(reg.host, "manifest", "test/img", "v1")
    assert f.rc == 1 and f"errno={EPROTO}" in f.err, f
    assert f"registry {reg.host}" in f.err and "listed as insecure" in f.err, f
    assert reg.log().count('"GET /v2/') == gets, "no request in plain HTTP reached the registry"
    f = oci_fetch("--insecure", reg.host, reg.host, "manifest", "test/img", "v1")
    assert f.rc == 0 and reg.log().count('"GET /v2/') > gets, f  # (the log does show plain requests)


def test_tls_with_the_operators_ca(registry_factory, oci_layout, tmp_path):
    reg = registry_factory(tls=True)
    amd, _ = push_image(reg, oci_layout)
    other = tmp_path / "other-ca"
    other.mkdir()
    other_ca = make_ca(str(other), "another-ca")
    f = oci_fetch("--ca", other_ca, "--ca", reg.ca_file, reg.host, "manifest", "test/img", "v1")
    assert f.rc == 0 and f.vals["digest"] == amd["digest"], f
    f = oci_fetch("--ca", other_ca, reg.host, "manifest", "test/img", "v1")
    assert f.rc == 1 and f"errno={EPROTO}" in f.err, f
    # without the CA the server's certificate is not trusted, and plain HTTP is never tried
    f = oci_fetch(reg.host, "manifest", "test/img", "v1")
    assert f.rc == 1 and f"errno={EPROTO}" in f.err and "certificate" in f.err.lower(), f
    f = oci_fetch("--ca", "/nonexistent/ca.pem", reg.host, "manifest", "test/img", "v1")
    assert f.rc == 1 and "field=ca_files" in f.err, f


def test_basic_auth_from_the_auth_file(registry_factory, oci_layout, tmp_path):
    reg = registry_factory(tls=True, auth="basic")
    amd, _ = push_image(reg, oci_layout)
    af = auth_file(tmp_path, reg.host, reg.user, reg.password)
    f = oci_fetch("--ca", reg.ca_file, reg.host, "manifest", "test/img", "v1", env={"REGISTRY_AUTH_FILE": af})
    assert f.rc == 0 and f.vals["digest"] == amd["digest"], f
    layer = amd["layers"][1]
    f = oci_fetch("--ca", reg.ca_file, "--auth-file", af, reg.host, "blob", "test/img", layer["digest"],
                  str(layer["size"]), str(tmp_path / "b"))
    assert f.rc == 0, f
    # ~/.docker/config.json when no file is named
    os.makedirs(tmp_path / "home" / ".docker")
    os.rename(af, tmp_path / "home" / ".docker" / "config.json")
    f = oci_fetch("--ca", reg.ca_file, reg.host, "manifest", "test/img", "v1", home=str(tmp_path / "home"))
    assert f.rc == 0, f
    f = oci_fetch("--ca", reg.ca_file, reg.host, "manifest", "test/img", "v1")
    assert f.rc == 1 and f"errno={EACCES}" in f.err and "HTTP 401" in f.err and "no credentials" in f.err, f
    bad = auth_file(tmp_path, reg.host, reg.user, "wrong")
    f = oci_fetch("--ca", reg.ca_file, "--auth-file", bad, reg.host, "manifest", "test/img", "v1")
    assert f.rc == 1 and f"errno={EACCES}" in f.err, f


def test_bearer_token_flow(registry_factory, oci_layout, tmp_path):
    reg = registry_factory(auth="token")
    amd, _ = push_image(reg, oci_layout)
    ts = reg.token_server
    token_host = ts.realm.split("/")[2]
    af = auth_file(tmp_path, reg.host, reg.user, reg.password)
    ts.requests.clear()
    layer = amd["layers"][0]
    f = oci_fetch("--insecure", reg.host, "--insecure", token_host, "--auth-file", af, reg.host, "blob", "test/img",
                  layer["digest"], str(layer["size"]), str(tmp_path / "b"))
    assert f.rc == 0, f
    assert len(ts.requests) == 1, ts.requests  # one token, fetched once, used for the blob
    q = ts.requests[0]
    assert q["query"]["scope"] == ["repository:test/img:pull"] and q["query"]["service"] == [reg.SERVICE]
    assert q["authorization"] == "Basic " + base64.b64encode(f"{reg.user}:{reg.password}".encode()).decode()

    # credentials never go to a realm over plain HTTP unless that host is listed insecure
    ts.requests.clear()
    f = oci_fetch("--insecure", reg.host, "--auth-file", af, reg.host, "manifest", "test/img", "v1")
    assert f.rc == 1 and f"errno={EACCES}" in f.err and "only if it is insecure" in f.err, f
    assert ts.requests and all(r["authorization"] is None for r in ts.requests), ts.requests


def test_a_token_refused_mid_pull_is_fetched_again(registry_factory, oci_layout, fault_proxy, tmp_path):
    """A blob GET answered 401 (the token expired, or error="insufficient_scope" naming the scope it
    wants): one new token for the scope the challenge names, and the blob is asked for again."""
    reg = registry_factory(auth="token")
    amd, _ = push_image(reg, oci_layout)
    ts = reg.token_server
    token_host = ts.realm.split("/")[2]
    proxy = fault_proxy(reg)
    layer = amd["layers"][0]
    proxy.challenge_once[layer["digest"]] = (f'Bearer realm="{ts.realm}",service="{reg.SERVICE}",'
                                             'scope="repository:test/img:pull,push",error="insufficient_scope"')
    af = auth_file(tmp_path, proxy.host, reg.user, reg.password)
    ts.requests.clear()
    f = oci_fetch("--insecure", proxy.host, "--insecure", token_host, "--auth-file", af, proxy.host, "blob",
                  "test/img", layer["digest"], str(layer["size"]), str(tmp_path / "b"))
    assert f.rc == 0, f
    assert [r["query"]["scope"] for r in ts.requests] == [["repository:test/img:pull"],
                                                          ["repository:test/img:pull,push"]], ts.requests
    sent = proxy.blob_requests(layer["digest"])
    assert len(sent) == 2 and all(r["headers"]["authorization"].startswith("Bearer ") for r in sent)
    assert sent[0]["headers"]["authorization"] != sent[1]["headers"]["authorization"]


def test_anonymous_bearer_token(registry_factory, oci_layout, tmp_path):
    """Docker Hub's way: no credentials, yet a token (an anonymous one) for pulls."""
    reg = registry_factory(auth="token", anonymous_pull=True)
    amd, _ = push_image(reg, oci_layout)
    ts = reg.token_server
    ts.requests.clear()
    f = oci_fetch("--insecure", reg.host, reg.host, "manifest", "test/img", "v1")
    assert f.rc == 0 and f.vals["digest"] == amd["digest"], f
    assert len(ts.requests) == 1 and ts.requests[0]["authorization"] is None, ts.requests


def test_parallel_blobs_share_one_client(registry_factory, oci_layout, tmp_path):
    """Layers download side by side through one client, which fetches one token for all of them."""
    reg = registry_factory(auth="token")
    lay = oci_layout()
    img = lay.new_image([Layer().file(f"f{i}", os.urandom(200_000)) for i in range(6)], compression="gzip")
    lay.tag(img, "v1")
    reg.push(lay.path, "v1", "test/par")
    af = auth_file(tmp_path, reg.host, reg.user, reg.password)
    token_host = reg.token_server.realm.split("/")[2]
    out = tmp_path / "out"
    out.mkdir()
    descs = img["layers"] + [img["config"]]
    reg.token_server.requests.clear()
    f = oci_fetch("--insecure", reg.host, "--insecure", token_host, "--auth-file", af, reg.host, "blobs", "test/par",
                  str(out), *[f"{d['digest']}:{d['size']}" for d in descs])
    assert f.rc == 0, f
    for i, d in enumerate(descs):
        assert sha256_digest((out / str(i)).read_bytes()) == d["digest"]
    assert len(reg.token_server.requests) == 1, reg.token_server.requests


def test_mirror_first_then_the_registry(registry_factory, oci_layout, fault_proxy, tmp_path):
    main = registry_factory()
    mirror = registry_factory()
    amd, _ = push_image(main, oci_layout)
    mirrored, _ = push_image(mirror, oci_layout, hello="the mirror's\n")
    pm, pr = fault_proxy(mirror), fault_proxy(main)
    f = oci_fetch("--insecure", pm.host, "--insecure", pr.host, "--mirror", pm.host, pr.host, "manifest", "test/img",
                  "v1")
    assert f.rc == 0 and f.vals["digest"] == mirrored["digest"] != amd["digest"], f
    assert any(r["path"] == "/v2/test/img/manifests/v1" for r in pm.requests)
    assert not any("/manifests/" in r["path"] for r in pr.requests), pr.requests
    # what the mirror lacks comes from the registry
    f = oci_fetch("--insecure", pm.host, "--insecure", pr.host, "--mirror", pm.host, pr.host, "manifest", "test/img",
                  amd["digest"])
    assert f.rc == 0 and f.vals["digest"] == amd["digest"], f
    assert [r["path"] for r in pm.requests if amd["digest"] in r["path"]] == [f"/v2/test/img/manifests/{amd['digest']}"]
    assert any(r["path"] == f"/v2/test/img/manifests/{amd['digest']}" for r in pr.requests)


def test_dropped_connection_resumes_with_a_range(registry_factory, oci_layout, fault_proxy, tmp_path):
    reg = registry_factory()
    amd, _ = push_image(reg, oci_layout, big=True)
    layer = amd["layers"][0]
    assert layer["size"] > 1 << 20
    proxy = fault_proxy(reg)
    cut = 700_000
    proxy.drop_once[layer["digest"]] = cut
    out = tmp_path / "blob"
    f = oci_fetch("--insecure", proxy.host, proxy.host, "blob", "test/img", layer["digest"], str(layer["size"]),
                  str(out))
    assert f.rc == 0, f
    ranges = [r["headers"].get("range") for r in proxy.blob_requests(layer["digest"])]
    assert ranges == [None, f"bytes={cut}-"], ranges
    assert out.stat().st_size == layer["size"] and "progress restarted" not in f.out


def test_corrupt_blob_is_refused(registry_factory, oci_layout, fault_proxy, tmp_path):
    reg = registry_factory()
    amd, _ = push_image(reg, oci_layout)
    layer = amd["layers"][0]
    reg.corrupt_blob(layer["digest"])
    out = tmp_path / "blob"
    f = oci_fetch("--insecure", reg.host, reg.host, "blob", "test/img", layer["digest"], str(layer["size"]), str(out))
    assert f.rc == 1 and f"errno={EBADMSG}" in f.err and "digest mismatch" in f.err, f
    assert f"registry {reg.host}, repository test/img" in f.err, f
    assert out.stat().st_size == 0 and f.vals["file_size"] == "0"
    # corrupted in flight by a mirror: refused there, then fetched whole from the registry
    good = amd["layers"][1]
    proxy = fault_proxy(reg)
    proxy.corrupt[good["digest"]] = True
    f = oci_fetch("--insecure", proxy.host, "--insecure", reg.host, "--mirror", proxy.host, reg.host, "blob",
                  "test/img", good["digest"], str(good["size"]), str(out))
    assert f.rc == 0 and out.stat().st_size == good["size"], f
    assert proxy.blob_requests(good["digest"])


def test_redirect_to_another_host_drops_authorization(registry_factory, oci_layout, fault_proxy, blob_server,
                                                      tmp_path):
    reg = registry_factory(auth="basic")
    amd, _ = push_image(reg, oci_layout)
    layer = amd["layers"][0]
    proxy = fault_proxy(reg)
    cdn = blob_server(reg)
    proxy.redirect[layer["digest"]] = cdn.url
    af = auth_file(tmp_path, proxy.host, reg.user, reg.password)
    out = tmp_path / "blob"
    f = oci_fetch("--insecure", proxy.host, "--auth-file", af, proxy.host, "blob", "test/img", layer["digest"],
                  str(layer["size"]), str(out))
    assert f.rc == 0 and out.stat().st_size == layer["size"], f
    sent = proxy.blob_requests(layer["digest"])
    assert sent and sent[0]["headers"].get("authorization", "").startswith("Basic ")
    assert cdn.requests and all("authorization" not in r["headers"] for r in cdn.requests), cdn.requests


def test_a_stalled_blob_times_out_and_resumes(registry_factory, oci_layout, fault_proxy, tmp_path):
    """A registry that stops sending mid-blob (connection open) is given up on after the stall
    timeout, and the blob is resumed where it stopped."""
    reg = registry_factory()
    amd, _ = push_image(reg, oci_layout, big=True)
    layer = amd["layers"][0]
    proxy = fault_proxy(reg)
    proxy.stall_once[layer["digest"]] = (300_000, 30)
    t0 = time.monotonic()
    f = oci_fetch("--insecure", proxy.host, "--stall", "2", proxy.host, "blob", "test/img", layer["digest"],
                  str(layer["size"]), str(tmp_path / "blob"))
    assert f.rc == 0, f
    assert time.monotonic() - t0 < 20
    ranges = [r["headers"].get("range") for r in proxy.blob_requests(layer["digest"])]
    assert ranges == [None, "bytes=300000-"], ranges


def test_a_silent_server_is_not_a_hang(tmp_path):
    """A host that accepts the connection and never answers: a timeout error naming the registry."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    host = f"127.0.0.1:{srv.getsockname()[1]}"
    try:
        t0 = time.monotonic()
        f = oci_fetch("--insecure", host, "--stall", "2", host, "manifest", "test/img", "v1")
        assert time.monotonic() - t0 < 20
        assert f.rc == 1 and f"errno={ETIMEDOUT}" in f.err and f"registry {host}" in f.err, f
    finally:
        srv.close()
