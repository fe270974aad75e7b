"""The tests' registry harness itself (registry.py): a real docker-registry on loopback, plain and
TLS, with htpasswd and bearer-token auth, images written by the test and pushed with skopeo, and the
fault proxy. Every image test builds on these, so they are proven here with a third-party client
(skopeo) before cordon's own client is tested against them."""

import json
import urllib.error
import urllib.request

import pytest

import tarfile

from registry import Layer, MT_INDEX, MT_MANIFEST, need_tools, sha256_digest, skopeo


def _two_platform_image(oci_layout):
    lay = oci_layout()
    amd = lay.new_image([Layer().dir("etc").file("etc/hello", "amd64\n"), Layer().file("etc/second", "2")],
                        compression="gzip", arch="amd64", config={"Env": ["A=1"], "Cmd": ["/bin/sh"]})
    arm = lay.new_image([Layer().file("etc/hello", "arm64\n")], compression="zstd", arch="arm64", variant="v8")
    idx = lay.add_index([amd, arm])
    lay.tag(idx, "multi").tag(amd, "amd")
    return lay, amd, arm, idx


@pytest.mark.parametrize("tls,auth", [(False, None), (True, None), (True, "basic"), (False, "token")],
                         ids=["plain", "tls", "tls-basic", "token"])
def test_push_and_inspect(registry_factory, oci_layout, tls, auth):
    reg = registry_factory(tls=tls, auth=auth)
    lay, amd, arm, idx = _two_platform_image(oci_layout)
    reg.push(lay.path, "multi", "test/img", all=True)
    reg.push(lay.path, "amd", "test/img")

    raw = reg.inspect("test/img", "multi", raw=True)
    assert json.loads(raw)["mediaType"] == MT_INDEX
    assert sha256_digest(raw.encode()) == idx["digest"], "skopeo must copy the index verbatim"
    info = reg.inspect("test/img", "amd")
    assert info["Digest"] == amd["digest"]
    assert info["Layers"] == [d["digest"] for d in amd["layers"]]
    assert info["Env"] == ["A=1"]
    arm_raw = json.loads(reg.inspect("test/img", arm["digest"], raw=True))
    assert arm_raw["mediaType"] == MT_MANIFEST
    assert arm_raw["layers"][0]["mediaType"].endswith("+zstd")

    if tls:  # the CA the test made is what makes the certificate valid
        ctx_err = None
        try:
            urllib.request.urlopen(reg.url + "/v2/", timeout=10)
        except urllib.error.URLError as e:
            ctx_err = e
        assert ctx_err is not None and "CERTIFICATE_VERIFY_FAILED" in str(ctx_err)
    if auth:  # and without credentials the registry refuses
        with pytest.raises(urllib.error.HTTPError) as e:
            import ssl
            ctx = ssl.create_default_context(cafile=reg.ca_file) if tls else None
            urllib.request.urlopen(f"{reg.url}/v2/test/img/manifests/amd", timeout=10, context=ctx)
        assert e.value.code == 401
        challenge = e.value.headers["WWW-Authenticate"]
        assert challenge.startswith("Basic " if auth == "basic" else "Bearer ")
    if auth == "token":
        ts = reg.token_server.requests
        assert ts and all(r["authorization"] and r["authorization"].startswith("Basic ") for r in ts)
        assert any("repository:test/img:pull" in s for r in ts for s in r["query"].get("scope", []))


def test_fault_proxy_drops_once_then_serves_ranges(registry_factory, oci_layout, fault_proxy):
    reg = registry_factory()
    lay = oci_layout()
    big = bytes(range(256)) * 4096  # 1 MiB, uncompressed so the blob is that big
    img = lay.new_image([Layer().file("big", big)], compression=None)
    lay.tag(img, "v1")
    reg.push(lay.path, "v1", "test/big")
    blob = img["layers"][0]
    proxy = fault_proxy(reg)
    proxy.drop_once[blob["digest"]] = 1000
    url = f"{proxy.url}/v2/test/big/blobs/{blob['digest']}"

    with pytest.raises(Exception) as e:  # http.client.IncompleteRead, wrapped or not
        urllib.request.urlopen(url, timeout=10).read()
    assert "IncompleteRead" in repr(e.value) or "1000 bytes read" in str(e.value)
    # the fault fires once: the next request gets it whole, and a range is honoured
    assert sha256_digest(urllib.request.urlopen(url, timeout=10).read()) == blob["digest"]
    req = urllib.request.Request(url, headers={"Range": "bytes=1000-"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 206
        assert r.headers["Content-Range"] == f"bytes 1000-{blob['size'] - 1}/{blob['size']}"
        assert len(r.read()) == blob["size"] - 1000
    assert [r["headers"].get("range") for r in proxy.blob_requests(blob["digest"])] == [None, None, "bytes=1000-"]

    proxy.corrupt[blob["digest"]] = True
    assert sha256_digest(urllib.request.urlopen(url, timeout=10).read()) != blob["digest"]


def test_archives_of_a_layout(oci_layout, tmp_path):
    """docker-archive: and oci-archive: inputs, made from a layout with skopeo."""
    need_tools()
    lay = oci_layout()
    img = lay.new_image([Layer().file("a", "1")], compression="gzip")
    lay.tag(img, "v1")
    skopeo(str(tmp_path), "copy", "--quiet", f"oci:{lay.path}:v1", f"docker-archive:{tmp_path}/d.tar:test/img:1")
    skopeo(str(tmp_path), "copy", "--quiet", "--preserve-digests", f"oci:{lay.path}:v1",
           f"oci-archive:{tmp_path}/o.tar:v1")
    with tarfile.open(tmp_path / "d.tar") as t:
        assert json.load(t.extractfile("manifest.json"))[0]["RepoTags"] == ["docker.io/test/img:1"]
    with tarfile.open(tmp_path / "o.tar") as t:
        names = t.getnames()
        assert "index.json" in names and f"blobs/sha256/{img['digest'].split(':')[1]}" in names
