"""A real OCI registry for the tests, on loopback only, and the images the tests push to it.

Nothing here reaches the internet: Debian's `docker-registry` (the CNCF distribution server, 2.8)
serves a temporary storage directory on 127.0.0.1, and the images are written by the test itself.

  Registry(workdir, tls=False, auth=None | "basic" | "token")
      .host "127.0.0.1:PORT", .url "http(s)://…", .ca_file (tls), .user/.password (auth)
      .push(layout_dir, tag, name, dest_tag=None, all=False)   skopeo copy oci:… docker://…
      .inspect(name, tag, raw=False)                            skopeo inspect, as a client would
      .blob_file(digest)                                        the stored blob (to corrupt it)
      .token_server                                             (auth="token") its request log
  FaultProxy(upstream_host, log)   an HTTP proxy in front of a plain registry: logs every request's
      headers, drops a blob's connection after N bytes once, answers 307 to another server,
      corrupts a blob in flight. BlobServer(registry_blob_dir): the "other host" of a redirect.
  OciLayout(dir): writes an OCI image layout (tar layers: none, gzip or zstd; configs; manifests;
      an index of several platforms), see new_image()/add_index().
  skopeo(workdir, …): skopeo with an accept-anything policy, e.g. to make oci-archive: and
      docker-archive: files of a layout.

The pytest fixtures (registry_factory, oci_layout) are at the end; conftest.py imports them.
Everything started here is a child of the test process and is stopped by pid.
"""

import base64
import contextlib
import datetime
import gzip
import hashlib
import http.client
import http.server
import io
import json
import os
import shutil
import socket
import ssl
import subprocess
import tarfile
import tempfile
import threading
import time
import urllib.parse

import pytest

import testenv

LOOPBACK = "127.0.0.1"
SKOPEO = "skopeo"
REGISTRY_BIN = "docker-registry"

MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = {None: "application/vnd.oci.image.layer.v1.tar",
            "gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
            "zstd": "application/vnd.oci.image.layer.v1.tar+zstd"}


def need_tools():
    """The registry, skopeo, htpasswd, zstd, openssl and python3-cryptography: tests/run-all installs
    them (a strict run fails without them, testenv.need)."""
    missing = [t for t in (REGISTRY_BIN, SKOPEO, "htpasswd", "zstd", "openssl") if not shutil.which(t)]
    try:
        import cryptography  # noqa: F401  (the token server signs with it)
    except ImportError:
        missing.append("python3-cryptography")
    testenv.need(not missing, f"{', '.join(missing)} (Debian: docker-registry skopeo apache2-utils zstd openssl "
                 "python3-cryptography)")


def skopeo(workdir, *args, env=None, timeout=300):
    """skopeo with a policy that accepts anything (the tests' own images) and an auth file of its own
    in workdir: e.g. skopeo(d, "copy", f"oci:{layout}:v1", f"docker-archive:{d}/x.tar:img:1") for the
    archive inputs. Raises with skopeo's stderr when it fails."""
    policy = os.path.join(workdir, "policy.json")
    if not os.path.exists(policy):
        with open(policy, "w") as f:
            json.dump({"default": [{"type": "insecureAcceptAnything"}]}, f)
    e = {**os.environ, "REGISTRY_AUTH_FILE": os.path.join(workdir, "skopeo-auth.json"), **(env or {})}
    r = subprocess.run([SKOPEO, "--policy", policy, *args], capture_output=True, text=True, timeout=timeout, env=e)
    if r.returncode != 0:
        raise RuntimeError(f"skopeo {' '.join(args)} exited {r.returncode}:\n{r.stderr}")
    return r.stdout


def free_port(addr=LOOPBACK):
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def wait_port(addr, port, proc=None, timeout=20.0, what="server"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection((addr, port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} not listening on {addr}:{port} after {timeout}s")


def sha256_digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------
# Certificates (openssl CLI): a CA, a server certificate for 127.0.0.1, a token-signing cert.

def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(d, name="cordon-test-ca"):
    """d/ca.crt, d/ca.key: a self-signed CA made for this test only."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-keyout", "ca.key", "-out", "ca.crt", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    return os.path.join(d, "ca.crt")


def make_server_cert(d, stem="server"):
    """d/STEM.crt, d/STEM.key signed by d/ca.*, valid for 127.0.0.1 and localhost."""
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", f"{stem}.key",
             "-out", f"{stem}.csr", cwd=d)
    with open(os.path.join(d, f"{stem}.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,IP:127.0.0.2,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", f"{stem}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", f"{stem}.ext", "-out", f"{stem}.crt", cwd=d)
    return os.path.join(d, f"{stem}.crt"), os.path.join(d, f"{stem}.key")


# ---------------------------------------------------------------------------------------------
# The token server of the bearer flow (distribution's docs/spec/auth/token.md).

def _b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


class TokenServer:
    """GET /token?service=S&scope=repository:NAME:ACTIONS: checks Basic credentials (anonymous gets
    pull only when anonymous_pull), answers {"token", "access_token", "expires_in"} with an RS256 JWT
    the registry verifies against the self-signed cert in its rootcertbundle. Every request is
    logged in .requests (path, query dict, Authorization header)."""

    def __init__(self, workdir, service, issuer, users, anonymous_pull=False, expires_in=300):
        self.service, self.issuer, self.users = service, issuer, users
        self.anonymous_pull, self.expires_in = anonymous_pull, expires_in
        self.requests = []
        self.key = os.path.join(workdir, "token.key")
        self.cert = os.path.join(workdir, "token.crt")
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=cordon-test-token",
                 "-keyout", "token.key", "-out", "token.crt", cwd=workdir)
        der = subprocess.run(["openssl", "x509", "-in", self.cert, "-outform", "DER"], capture_output=True,
                             check=True).stdout
        self.x5c = base64.b64encode(der).decode()
        self.port = free_port()
        self.realm = f"http://{LOOPBACK}:{self.port}/token"
        self.httpd = http.server.ThreadingHTTPServer((LOOPBACK, self.port), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def _sign(self, payload):
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding
        with open(self.key, "rb") as f:
            key = serialization.load_pem_private_key(f.read(), password=None)
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self.x5c]}
        signing = _b64url(json.dumps(header).encode()) + "." + _b64url(json.dumps(payload).encode())
        sig = key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return signing + "." + _b64url(sig)

    def _grant(self, user, scopes):
        access = []
        for scope in scopes:
            parts = scope.split(":")
            if len(parts) != 3 or parts[0] != "repository":
                continue
            wanted = parts[2].split(",")
            allowed = ["pull", "push", "delete", "*"] if user else (["pull"] if self.anonymous_pull else [])
            actions = [a for a in wanted if a in allowed]
            if actions:
                access.append({"type": "repository", "name": parts[1], "actions": actions})
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": user or "", "aud": self.service, "exp": now + self.expires_in,
                  "nbf": now - 10, "iat": now, "jti": os.urandom(8).hex(), "access": access}
        return self._sign(claims)

    def _handler(self):
        server = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                u = urllib.parse.urlsplit(self.path)
                q = urllib.parse.parse_qs(u.query)
                auth = self.headers.get("Authorization")
                server.requests.append({"path": u.path, "query": q, "authorization": auth})
                user = None
                if auth:
                    try:
                        kind, b64 = auth.split(" ", 1)
                        name, _, pw = base64.b64decode(b64).decode().partition(":")
                    except ValueError:
                        kind, name, pw = "", "", ""
                    if kind != "Basic" or server.users.get(name) != pw:
                        return self._answer(401, {"errors": [{"code": "UNAUTHORIZED", "message": "bad credentials"}]})
                    user = name
                if u.path != "/token" or q.get("service") != [server.service]:
                    return self._answer(400, {"errors": [{"code": "DENIED", "message": "wrong service"}]})
                if not user and not server.anonymous_pull:
                    return self._answer(401, {"errors": [{"code": "UNAUTHORIZED", "message": "credentials required"}]})
                scopes = [s for v in q.get("scope", []) for s in v.split(" ")]
                tok = server._grant(user, scopes)
                self._answer(200, {"token": tok, "access_token": tok, "expires_in": server.expires_in,
                                   "issued_at": datetime.datetime.now(datetime.timezone.utc).isoformat()})

            def _answer(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return H

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


# ---------------------------------------------------------------------------------------------
# The registry.

class Registry:
    """One docker-registry on 127.0.0.1:PORT with its own storage under workdir."""

    USER, PASSWORD = "cordon", "s3cret-pass"
    SERVICE, ISSUER = "cordon-test-registry", "cordon-test-token-server"

    def __init__(self, workdir, tls=False, auth=None, anonymous_pull=False):
        assert auth in (None, "basic", "token")
        self.workdir, self.tls, self.auth = workdir, tls, auth
        self.storage = os.path.join(workdir, "storage")
        os.makedirs(self.storage, exist_ok=True)
        self.port = free_port()
        self.host = f"{LOOPBACK}:{self.port}"
        self.url = ("https" if tls else "http") + "://" + self.host
        self.user = self.password = None
        self.ca_file = None
        self.token_server = None
        self.proc = None
        self.log_path = os.path.join(workdir, "registry.log")
        cfg = ["version: 0.1", "log:", "  level: info", "  accesslog:", "    disabled: false",
               "storage:", f"  filesystem:\n    rootdirectory: {self.storage}", "  delete:\n    enabled: true",
               "http:", f"  addr: {self.host}", "  secret: cordon-test-secret"]
        if tls:
            self.ca_file = make_ca(workdir)
            crt, key = make_server_cert(workdir)
            cfg += ["  tls:", f"    certificate: {crt}", f"    key: {key}"]
            # skopeo's --cert-dir wants the CA as ca.crt in a directory of its own
            self.cert_dir = os.path.join(workdir, "certs.d")
            os.makedirs(self.cert_dir, exist_ok=True)
            shutil.copy(self.ca_file, os.path.join(self.cert_dir, "ca.crt"))
        if auth:
            self.user, self.password = self.USER, self.PASSWORD
        if auth == "basic":
            htpasswd = os.path.join(workdir, "htpasswd")
            # an htpasswd file must exist: the registry makes one with a random user otherwise
            subprocess.run(["htpasswd", "-Bbc", htpasswd, self.user, self.password], check=True,
                           capture_output=True, timeout=60)
            cfg += ["auth:", "  htpasswd:", "    realm: cordon-test-basic", f"    path: {htpasswd}"]
        elif auth == "token":
            self.token_server = TokenServer(workdir, self.SERVICE, self.ISSUER, {self.user: self.password},
                                            anonymous_pull=anonymous_pull)
            cfg += ["auth:", "  token:", f"    realm: {self.token_server.realm}", f"    service: {self.SERVICE}",
                    f"    issuer: {self.ISSUER}", f"    rootcertbundle: {self.token_server.cert}"]
        self.config = os.path.join(workdir, "config.yml")
        with open(self.config, "w") as f:
            f.write("\n".join(cfg) + "\n")

    def start(self):
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([REGISTRY_BIN, "serve", self.config], stdout=self._log, stderr=self._log,
                                     stdin=subprocess.DEVNULL)
        try:
            wait_port(LOOPBACK, self.port, self.proc, what=f"docker-registry ({self.log_path})")
        except RuntimeError:
            self.stop()
            raise
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self._log.close()
        if self.token_server:
            self.token_server.stop()

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    # -- skopeo --------------------------------------------------------------------------------
    def _skopeo(self, *args, timeout=300):
        return skopeo(self.workdir, *args, timeout=timeout)

    def _creds(self, prefix):
        return [f"--{prefix}creds", f"{self.user}:{self.password}"] if self.user else []

    def push(self, layout, tag, name, dest_tag=None, all=False):
        """skopeo copy oci:LAYOUT:TAG docker://HOST/NAME:DEST_TAG (blobs copied verbatim)."""
        args = ["copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false", *self._creds("dest-")]
        if all:
            args.append("--all")
        self._skopeo(*args, f"oci:{layout}:{tag}", f"docker://{self.host}/{name}:{dest_tag or tag}")

    def inspect(self, name, ref, raw=False):
        """skopeo inspect, verifying TLS against the test's CA when the registry has TLS."""
        sep = "@" if ref.startswith("sha256:") else ":"
        tls = ["--cert-dir", self.cert_dir] if self.tls else ["--tls-verify=false"]
        out = self._skopeo("inspect", *(["--raw"] if raw else []), *tls, *self._creds(""),
                           f"docker://{self.host}/{name}{sep}{ref}")
        return out if raw else json.loads(out)

    def blob_file(self, digest):
        hexd = digest.split(":", 1)[1]
        return os.path.join(self.storage, "docker/registry/v2/blobs/sha256", hexd[:2], hexd, "data")

    def corrupt_blob(self, digest, offset=None):
        """Flip one byte of a stored blob in place (same length): the registry serves it unchecked."""
        path = self.blob_file(digest)
        with open(path, "r+b") as f:
            size = os.fstat(f.fileno()).st_size
            pos = size // 2 if offset is None else offset
            f.seek(pos)
            b = f.read(1)
            f.seek(pos)
            f.write(bytes([b[0] ^ 0xFF]))


# ---------------------------------------------------------------------------------------------
# The fault proxy: HTTP in front of a plain registry, and a second server as a redirect target.

class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


class FaultProxy:
    """HTTP on 127.0.0.1:PORT forwarding to a plain-HTTP upstream (host:port). Faults, each by
    blob digest:
      drop_once[digest] = N       the first GET of that blob is cut after N body bytes
      redirect[digest] = base     a GET of that blob answers 307 to base + the same path
      corrupt[digest] = True      one byte of that blob's body is flipped in flight
      stall_once[digest] = (N, s) the first GET of that blob sends N body bytes, then nothing for s
                                  seconds (the connection open), then closes
      challenge_once[digest] = H  the first GET of that blob is answered 401 with WWW-Authenticate H
                                  (an expired token, or insufficient_scope)
    .requests: every request seen, as dicts (method, path, headers lower-cased)."""

    def __init__(self, upstream, addr=LOOPBACK):
        self.upstream = upstream
        self.drop_once, self.redirect, self.corrupt, self.stall_once = {}, {}, {}, {}
        self.challenge_once = {}
        self.requests = []
        self.port = free_port(addr)
        self.host = f"{addr}:{self.port}"
        self.url = "http://" + self.host
        self.httpd = _Server((addr, self.port), self._handler())
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def blob_requests(self, digest):
        return [r for r in self.requests if r["path"].endswith("/blobs/" + digest)]

    def _handler(self):
        proxy = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_HEAD(self):
                self._forward()

            def do_GET(self):
                self._forward()

            def _forward(self):
                headers = {k.lower(): v for k, v in self.headers.items()}
                proxy.requests.append({"method": self.command, "path": self.path, "headers": headers})
                digest = self.path.rsplit("/blobs/", 1)[1] if "/blobs/" in self.path else None
                challenge = proxy.challenge_once.pop(digest, None) if digest and self.command == "GET" else None
                if challenge:
                    body = b'{"errors":[{"code":"UNAUTHORIZED","message":"token expired"}]}'
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", challenge)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if digest and digest in proxy.redirect and self.command == "GET":
                    self.send_response(307)
                    self.send_header("Location", proxy.redirect[digest] + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                conn = http.client.HTTPConnection(proxy.upstream, timeout=30)
                fwd = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, headers=fwd)
                resp = conn.getresponse()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("connection", "transfer-encoding"):
                        self.send_header(k, v)
                body = resp.read() if self.command == "GET" else b""
                if self.command == "GET" and resp.getheader("Content-Length") is None:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                conn.close()
                if digest and self.command == "GET" and resp.status in (200, 206):
                    if proxy.corrupt.get(digest) and body:
                        body = body[:len(body) // 2] + bytes([body[len(body) // 2] ^ 0xFF]) + body[len(body) // 2 + 1:]
                    cut = proxy.drop_once.pop(digest, None)
                    stall = proxy.stall_once.pop(digest, None)
                    if stall is not None:
                        cut = stall[0]
                    if cut is not None:
                        self.wfile.write(body[:cut])
                        self.wfile.flush()
                        if stall is not None:
                            time.sleep(stall[1])
                        self.close_connection = True
                        with contextlib.suppress(OSError):
                            self.connection.shutdown(socket.SHUT_RDWR)
                        return
                self.wfile.write(body)

        return H

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class BlobServer:
    """The other host of a redirect (a "CDN"): serves blobs from a registry's storage at any path
    ending in /blobs/<digest>, and logs each request's headers (.requests) — so a test can see
    whether an Authorization header followed the redirect. Plain HTTP on addr (loopback)."""

    def __init__(self, registry, addr="127.0.0.2"):
        self.registry = registry
        self.requests = []
        self.port = free_port(addr)
        self.url = f"http://{addr}:{self.port}"
        self.httpd = _Server((addr, self.port), self._handler())
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def _handler(self):
        srv = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                srv.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}})
                digest = self.path.rsplit("/blobs/", 1)[-1]
                try:
                    with open(srv.registry.blob_file(digest), "rb") as f:
                        data = f.read()
                except (OSError, IndexError):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                start = 0
                rng = self.headers.get("Range", "")
                if rng.startswith("bytes=") and rng.endswith("-"):
                    start = int(rng[6:-1])
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                self.wfile.write(data[start:])

        return H

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


# ---------------------------------------------------------------------------------------------
# OCI image layouts written by the test (image-spec image-layout.md).

class Layer:
    """One layer tar, built from entries: file(), dir(), symlink(), hardlink(), whiteout(),
    opaque(), device(), or any tarfile.TarInfo with data."""

    def __init__(self):
        self.entries = []  # (TarInfo, bytes or None)

    def _info(self, name, type_, mode, uid=0, gid=0, mtime=1700000000):
        ti = tarfile.TarInfo(name)
        ti.type, ti.mode, ti.uid, ti.gid, ti.mtime = type_, mode, uid, gid, mtime
        return ti

    def file(self, name, data=b"", mode=0o644, uid=0, gid=0, pax=None):
        data = data.encode() if isinstance(data, str) else data
        ti = self._info(name, tarfile.REGTYPE, mode, uid, gid)
        ti.size = len(data)
        if pax:
            ti.pax_headers = dict(pax)
        self.entries.append((ti, data))
        return self

    def dir(self, name, mode=0o755, uid=0, gid=0):
        self.entries.append((self._info(name, tarfile.DIRTYPE, mode, uid, gid), None))
        return self

    def symlink(self, name, target):
        ti = self._info(name, tarfile.SYMTYPE, 0o777)
        ti.linkname = target
        self.entries.append((ti, None))
        return self

    def hardlink(self, name, target):
        ti = self._info(name, tarfile.LNKTYPE, 0o644)
        ti.linkname = target
        self.entries.append((ti, None))
        return self

    def whiteout(self, path):
        d, _, base = path.rpartition("/")
        return self.file((d + "/" if d else "") + ".wh." + base)

    def opaque(self, dirpath):
        return self.file(dirpath.rstrip("/") + "/.wh..wh..opq")

    def device(self, name, major=1, minor=3, char=True):
        ti = self._info(name, tarfile.CHRTYPE if char else tarfile.BLKTYPE, 0o666)
        ti.devmajor, ti.devminor = major, minor
        self.entries.append((ti, None))
        return self

    def raw(self, tarinfo, data=None):
        self.entries.append((tarinfo, data))
        return self

    def tar(self):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
            for ti, data in self.entries:
                t.addfile(ti, io.BytesIO(data) if data is not None else None)
        return buf.getvalue()


def compress(data, compression):
    if compression is None:
        return data
    if compression == "gzip":
        return gzip.compress(data, mtime=0)
    if compression == "zstd":
        return subprocess.run(["zstd", "-q", "-c", "-3"], input=data, capture_output=True, check=True,
                              timeout=120).stdout
    raise ValueError(compression)


class OciLayout:
    """An OCI image layout directory. new_image() writes layers, config and manifest blobs and
    returns the manifest's descriptor; tag() names a manifest or index in index.json; add_index()
    writes an image index of several manifests."""

    def __init__(self, path):
        self.path = path
        os.makedirs(os.path.join(path, "blobs", "sha256"), exist_ok=True)
        with open(os.path.join(path, "oci-layout"), "w") as f:
            json.dump({"imageLayoutVersion": "1.0.0"}, f)
        self.refs = []

    def blob(self, data, media_type):
        d = sha256_digest(data)
        with open(os.path.join(self.path, "blobs", "sha256", d.split(":")[1]), "wb") as f:
            f.write(data)
        return {"mediaType": media_type, "digest": d, "size": len(data)}

    def new_image(self, layers, compression="gzip", arch="amd64", os_="linux", variant=None, config=None):
        """layers: Layer objects (or raw tar bytes). config: the image config's "config" object
        (Env, WorkingDir, User, Entrypoint, Cmd, …). Returns the manifest descriptor, with
        "layers" (their descriptors), "diff_ids" and "config" (descriptor) added for the test's use."""
        descs, diff_ids = [], []
        for layer in layers:
            tar = layer.tar() if isinstance(layer, Layer) else layer
            diff_ids.append(sha256_digest(tar))
            descs.append(self.blob(compress(tar, compression), MT_LAYER[compression]))
        cfg = {"architecture": arch, "os": os_, "config": config or {},
               "rootfs": {"type": "layers", "diff_ids": diff_ids},
               "history": [{"created_by": "cordon tests"} for _ in layers]}
        if variant:
            cfg["variant"] = variant
        cdesc = self.blob(json.dumps(cfg, sort_keys=True).encode(), MT_CONFIG)
        manifest = {"schemaVersion": 2, "mediaType": MT_MANIFEST, "config": cdesc, "layers": descs}
        mdesc = self.blob(json.dumps(manifest, sort_keys=True).encode(), MT_MANIFEST)
        mdesc["platform"] = {"architecture": arch, "os": os_, **({"variant": variant} if variant else {})}
        return {**mdesc, "layers": descs, "diff_ids": diff_ids, "config": cdesc}

    def add_index(self, manifests):
        """An image index of the given manifest descriptors (their platforms kept)."""
        entries = [{k: m[k] for k in ("mediaType", "digest", "size", "platform")} for m in manifests]
        index = {"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": entries}
        return self.blob(json.dumps(index, sort_keys=True).encode(), MT_INDEX)

    def tag(self, desc, tag):
        """Name desc (a manifest or index descriptor) TAG in index.json."""
        entry = {k: desc[k] for k in ("mediaType", "digest", "size")}
        entry["annotations"] = {"org.opencontainers.image.ref.name": tag}
        self.refs = [r for r in self.refs if r["annotations"]["org.opencontainers.image.ref.name"] != tag]
        self.refs.append(entry)
        with open(os.path.join(self.path, "index.json"), "w") as f:
            json.dump({"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": self.refs}, f)
        return self


# ---------------------------------------------------------------------------------------------
# pytest fixtures

@pytest.fixture
def registry_factory():
    """registry_factory(tls=False, auth=None|"basic"|"token", anonymous_pull=False) → a started
    Registry; each in its own temp dir, all stopped after the test."""
    need_tools()
    made, dirs = [], []

    def make(**kw):
        d = tempfile.mkdtemp(prefix="cordon-reg-")
        dirs.append(d)
        r = Registry(d, **kw).start()
        made.append(r)
        return r

    yield make
    for r in made:
        r.stop()
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def oci_layout():
    """oci_layout() → a new, empty OciLayout in a temp dir (removed after the test)."""
    dirs = []

    def make():
        d = tempfile.mkdtemp(prefix="cordon-oci-")
        dirs.append(d)
        return OciLayout(d)

    yield make
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def fault_proxy():
    """fault_proxy(registry) → a FaultProxy in front of a plain-HTTP registry; stopped after."""
    made = []

    def make(registry):
        assert not registry.tls, "the fault proxy speaks plain HTTP to its upstream"
        p = FaultProxy(registry.host)
        made.append(p)
        return p

    yield make
    for p in made:
        p.stop()


@pytest.fixture
def blob_server():
    """blob_server(registry) → a BlobServer on 127.0.0.2 serving that registry's blobs."""
    made = []

    def make(registry):
        s = BlobServer(registry)
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop()
