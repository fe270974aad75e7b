"""Ports (issue 21, point 4): a TCP service listening inside a sandbox, reached from the client through
cordond — the HTTP proxy path /v1/sandboxes/{id}/ports/{port}/… (a WebSocket upgrade included), a raw
tunnel (cordon port-forward, the SDK's open_port and forward_port) — whatever the sandbox's network
mode: cordond connects from inside the sandbox's network namespace, nothing listens on the host."""

import asyncio
import base64
import json
import os
import socket
import subprocess
import time

import pytest

import cordon
from cordon import AsyncSandbox, Sandbox

SERVER = r'''
import base64, hashlib, http.server, json, socket, sys, threading

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def do_any(self):
        if self.headers.get("Upgrade", "").lower() == "websocket":
            key = self.headers["Sec-WebSocket-Key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", base64.b64encode(hashlib.sha1(key.encode()).digest()).decode())
            self.end_headers()
            self.wfile.flush()
            for d in iter(lambda: self.connection.recv(65536), b""):
                self.connection.sendall(d.upper())
            self.close_connection = True
            return
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        out = json.dumps({"method": self.command, "path": self.path, "headers": dict(self.headers),
                          "body": body.decode(), "client": self.client_address[0]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = do_PUT = do_DELETE = do_any

def echo(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(64)
    def one(c):
        for d in iter(lambda: c.recv(65536), b""):
            c.sendall(d)
        c.shutdown(socket.SHUT_WR)
        c.close()
    while True:
        threading.Thread(target=one, args=(s.accept()[0],), daemon=True).start()

def sticky(port):
    """An HTTP server that never closes: its answer says nothing of the connection's end, and it logs
    whatever else comes on the connection (what a pooling client would send next)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(64)
    while True:
        c = s.accept()[0]
        got = c.recv(65536)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        with open("/tmp/sticky.log", "ab") as log:
            log.write(got)
            for d in iter(lambda: c.recv(65536), b""):
                log.write(d)
                log.flush()

threading.Thread(target=echo, args=(7000,), daemon=True).start()
threading.Thread(target=sticky, args=(7100,), daemon=True).start()
http.server.ThreadingHTTPServer(("127.0.0.1", 8000), H).serve_forever()
'''


def start_servers(daemon, sb):
    sb.files.write("/tmp/srv.py", SERVER.encode())
    sb.start(["python3", "/tmp/srv.py"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, _ = daemon.http("GET", f"/v1/sandboxes/{sb.id}/ports/8000/ready")
        if status == 200:
            return
        time.sleep(0.2)
    raise AssertionError("the sandbox's server did not come up")


def raw_request(daemon, data):
    """data sent on a connection of its own to cordond's socket; what came back until it closed."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(daemon.socket)
    s.sendall(data)
    got = b""
    for chunk in iter(lambda: s.recv(65536), b""):
        got += chunk
    s.close()
    return got


TIERS = ["container", pytest.param("microvm", marks=pytest.mark.needs_vm)]


@pytest.mark.parametrize("network,tier", [("none", "container"), ("allowlist", "container"), ("open", "container"),
                                          pytest.param("none", "microvm", marks=pytest.mark.needs_vm),
                                          pytest.param("allowlist", "microvm", marks=pytest.mark.needs_vm)])
def test_the_http_proxy_path_reaches_a_server_in_the_sandbox(daemon, network, tier):
    """A VM guest's loopback is the guest's: its init makes the connection and relays it (frame TCP)."""
    net = {"mode": "allowlist", "allow": ["203.0.113.7"]} if network == "allowlist" else network
    with Sandbox.create(endpoint=daemon.endpoint, network=net, tier=tier) as sb:
        start_servers(daemon, sb)
        status, body = daemon.http("GET", f"/v1/sandboxes/{sb.id}/ports/8000/some/path?x=1&y=%2F",
                                   headers={"X-Test": "kept", "Authorization": "Bearer not-for-the-sandbox"})
        assert status == 200, body
        assert body["method"] == "GET" and body["path"] == "/some/path?x=1&y=%2F", body
        headers = {k.lower(): v for k, v in body["headers"].items()}
        # the client's fields go on, but never cordond's token (on TCP, the bearer token). Seen
        # failing with "authorization" left off api-ports.c's hop_by_hop(): the sandbox's server got
        # {'authorization': 'Bearer not-for-the-sandbox', …}
        assert headers["x-test"] == "kept" and "authorization" not in headers, headers
        assert headers["x-forwarded-prefix"] == f"/v1/sandboxes/{sb.id}/ports/8000", headers
        assert headers["connection"] == "close"
        # the connection came from inside the sandbox's network namespace
        assert body["client"] == "127.0.0.1"
        status, body = daemon.http("POST", f"/v1/sandboxes/{sb.id}/ports/8000/", body=b"x" * 100000)
        assert status == 200 and body["method"] == "POST" and len(body["body"]) == 100000, status
        status, body = daemon.http("GET", f"/v1/sandboxes/{sb.id}/ports/8000")
        assert status == 200 and body["path"] == "/", body


@pytest.mark.parametrize("tier", TIERS)
def test_a_pooling_clients_next_request_never_reaches_the_sandbox(daemon, tier):
    """A server in the sandbox that never closes its connection, after an answer with a length, makes
    a pooling HTTP client send its next request — a cordond call, with cordond's bearer token — on the
    same connection. cordond passes on the client's request only, and ends the connection on more.
    (Seen failing with the client's bytes passed on after the request, as the first version did: the
    connection stayed open — this recv timed out — and the next request went to the sandbox.)"""
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        start_servers(daemon, sb)
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(30)
        s.connect(daemon.socket)
        s.sendall(f"GET /v1/sandboxes/{sb.id}/ports/7100/first HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        got = b""
        while not got.endswith(b"ok"):
            got += s.recv(100)
        s.sendall(f"DELETE /v1/sandboxes/{sb.id} HTTP/1.1\r\nHost: x\r\n"
                  f"Authorization: Bearer the-token-of-cordond\r\n\r\n".encode())
        try:
            assert s.recv(100) == b""  # ended, not passed on
        except ConnectionResetError:
            pass  # ended, with the request unread
        s.close()
        time.sleep(0.5)
        log = sb.files.read("/tmp/sticky.log")
        assert b"GET /first" in log and b"the-token-of-cordond" not in log and b"DELETE" not in log, log


@pytest.mark.parametrize("tier", TIERS)
def test_a_websocket_upgrade_goes_through_both_ways(daemon, tier):
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        start_servers(daemon, sb)
        key = base64.b64encode(os.urandom(16)).decode()
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(30)
        s.connect(daemon.socket)
        s.sendall(f"GET /v1/sandboxes/{sb.id}/ports/8000/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(1)
        assert head.startswith(b"HTTP/1.1 101"), head
        assert b"Sec-WebSocket-Accept" in head
        for msg in (b"hello", b"world" * 10000):
            s.sendall(msg)
            got = b""
            while len(got) < len(msg):
                got += s.recv(65536)
            assert got == msg.upper()
        s.close()


@pytest.mark.parametrize("tier", TIERS)
def test_raw_tunnels_through_the_sdk_and_the_cli(daemon, tier):
    from cordonlib import CORDON_BIN
    with Sandbox.create(endpoint=daemon.endpoint, network="none", tier=tier) as sb:
        start_servers(daemon, sb)
        t = sb.open_port(7000)
        t.sendall(b"ping")
        assert t.recv(100) == b"ping"
        t.shutdown(socket.SHUT_WR)  # each way ends on its own
        assert t.recv(100) == b""
        t.close()
        with sb.forward_port(7000) as fwd:
            for i in range(5):
                with socket.create_connection(("127.0.0.1", fwd.port), timeout=30) as c:
                    c.sendall(b"via forward %d" % i)
                    assert c.recv(100) == b"via forward %d" % i

        async def main():
            asb = await AsyncSandbox.connect(sb.id, endpoint=daemon.endpoint)
            reader, writer = await asb.open_port(7000)
            writer.write(b"async")
            await writer.drain()
            assert await reader.readexactly(5) == b"async"
            writer.close()
        asyncio.run(main())
        env = dict(os.environ, CORDON_SOCKET=daemon.socket)
        p = subprocess.Popen([CORDON_BIN, "port-forward", sb.id, "0:7000"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env, text=True)
        try:
            line = p.stdout.readline()
            assert line.startswith("Forwarding from 127.0.0.1:") and line.rstrip().endswith("-> 7000"), line
            port = int(line.split(":")[1].split()[0])
            data = os.urandom(1 << 20)
            with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
                c.sendall(data)
                c.shutdown(socket.SHUT_WR)
                got = b""
                for chunk in iter(lambda: c.recv(65536), b""):
                    got += chunk
            assert got == data
        finally:
            p.terminate()
            p.wait(timeout=30)


def test_errors_name_the_port_and_nothing_is_left(daemon, tier):
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        if tier == "process":  # the host's network stack: never reached for it
            status, body = daemon.http("GET", f"/v1/sandboxes/{sb.id}/ports/8000/")
            assert status == 501 and body["error"]["field"] == "port", body
            return
        status, body = daemon.http("GET", f"/v1/sandboxes/{sb.id}/ports/8000/")
        assert status == 502 and body["error"]["code"] == "port_unreachable", body
        assert "8000" in body["error"]["message"]
        with pytest.raises(cordon.CordonError) as e:
            sb.open_port(7000)
        assert e.value.status == 502 and e.value.code == "port_unreachable"
        for bad in ("0", "65536", "http", "08000"):
            status, body = daemon.http("GET", f"/v1/sandboxes/{sb.id}/ports/{bad}/")
            assert status == 400 and body["error"]["field"] == "port", (bad, body)
        start_servers(daemon, sb)
        fds = len(os.listdir(f"/proc/{daemon.proc.pid}/fd"))
        for _ in range(50):
            assert daemon.http("GET", f"/v1/sandboxes/{sb.id}/ports/8000/x")[0] == 200
        held = [sb.open_port(7000) for _ in range(5)]  # open when the sandbox goes
    deadline = time.monotonic() + 30
    while len(os.listdir(f"/proc/{daemon.proc.pid}/fd")) > fds and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(os.listdir(f"/proc/{daemon.proc.pid}/fd")) <= fds
    for t in held:
        t.settimeout(30)
        assert t.recv(10) == b""  # closed with the sandbox
        t.close()
