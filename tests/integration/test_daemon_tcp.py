"""cordond's TCP listener against clients without the token (issue 18, item 10): a connection is
authenticated on its first header block, before its body is read; connections that have not shown
the token are few (max_unauthenticated, a new one evicts the oldest) and short-lived (auth_timeout);
an authenticated client is served throughout. Real sockets on 127.0.0.1, a cordond of the test's
own; its memory is read from /proc/PID/status."""

import http.client
import os
import socket
import threading
import time

import pytest

import cordon
from cordon import Sandbox
from cordonlib import Daemon, read, tcp_listener, wait_for

BODY = 200 << 20  # the red team's unauthenticated POSTs: 200 MiB each


@pytest.fixture
def tcp_daemon(shared_dir):
    """(daemon, port, token) for a cordond listening on 127.0.0.1 too; extra flags by indirect param."""
    flags, port, token = tcp_listener(shared_dir)
    made = []

    def start(*args):
        d = Daemon(shared_dir, *flags, *args)
        made.append(d)
        return d, port, token

    yield start
    for d in made:
        assert d.stop() == 0, d.output()


def rss_kb(pid):
    for line in read(f"/proc/{pid}/status").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def sockets_of(pid):
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


def health(port, token):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/v1/health", headers={"Authorization": f"Bearer {token}"})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


def read_response(s, timeout=5):
    """What the server says before it closes (b"" if it closed or reset without a word)."""
    s.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    return data


def test_unauthenticated_bodies_are_not_read(tcp_daemon):
    """Three 200 MiB POSTs without a token: refused on their headers, their bodies never read.
    Seen failing before the fix: "cordond grew by 623292 kB while three unauthenticated 200 MiB
    POSTs were sent" (the whole bodies were read, then answered 401)."""
    d, port, token = tcp_daemon()
    before = rss_kb(d.proc.pid)
    peak = [before]
    sent = [0, 0, 0]
    answers = [b"", b"", b""]

    def post(i):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {BODY}\r\n\r\n".encode())
        chunk = b"{" * (1 << 20)
        try:
            while sent[i] < BODY:
                s.sendall(chunk)
                sent[i] += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answers[i] = read_response(s)
        s.close()

    threads = [threading.Thread(target=post, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak[0] = max(peak[0], rss_kb(d.proc.pid))
        time.sleep(0.05)
    grown = peak[0] - before
    assert grown < 20 << 10, f"cordond grew by {grown} kB while three unauthenticated 200 MiB POSTs were sent"
    assert all(n < BODY for n in sent), f"the server read whole bodies: {sent}"
    for a in answers:  # a 401 when the client could still read it, else a reset: never a 2xx
        assert a == b"" or a.startswith(b"HTTP/1.1 401"), a[:200]
    assert health(port, token) == 200


def test_a_wrong_token_is_refused_on_the_headers(tcp_daemon):
    """The answer comes before any of the announced body is sent, and the connection is closed.
    Seen failing before the fix: TimeoutError, no answer (evhttp waited for the 100 MB body)."""
    d, port, token = tcp_daemon()
    for auth in (b"Authorization: Bearer wrong-token-0123456789\r\n", b"", b"authorization: bearer " +
                 token.encode() + b"x\r\n"):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"PUT /v1/sandboxes/x/files?path=/f HTTP/1.1\r\nHost: x\r\n" + auth +
                  b"Content-Length: 100000000\r\n\r\n")
        answer = read_response(s)
        s.close()
        assert answer.startswith(b"HTTP/1.1 401 "), answer
        assert b'"code":"unauthorized"' in answer and b"Connection: close" in answer, answer
    assert health(port, token) == 200
    status, text = d.http("GET", "/metrics")
    assert "cordon_http_unauthenticated_connections 0" in text.decode()


def test_idle_strangers_are_few_and_short_lived(tcp_daemon):
    """200 idle connections and a slow trickler: at most max_unauthenticated are held, none past
    auth_timeout, and an authenticated client is served throughout.
    Seen failing before the fix: "timed out after 5s waiting for cordond to hold at most 16
    strangers" (it held all 200)."""
    d, port, token = tcp_daemon("--auth-timeout", "2", "--max-unauthenticated", "16")
    base = sockets_of(d.proc.pid)
    idle = []
    for _ in range(200):
        idle.append(socket.create_connection(("127.0.0.1", port)))
    assert health(port, token) == 200
    held = wait_for(lambda: (lambda n: n if n <= base + 16 + 2 else None)(sockets_of(d.proc.pid)),
                    timeout=5, what="cordond to hold at most 16 strangers")
    assert held <= base + 18
    status, text = d.http("GET", "/metrics")
    gauge = [l for l in text.decode().splitlines() if l.startswith("cordon_http_unauthenticated_connections ")]
    assert gauge and int(gauge[0].split()[1]) <= 16, gauge

    # A client that trickles its header a byte at a time is cut off at auth_timeout all the same.
    trickle = socket.create_connection(("127.0.0.1", port))
    t0 = time.monotonic()
    trickle.settimeout(0.5)
    closed = False
    for b in b"GET /v1/health HTTP/1.1\r\nHost: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx":
        try:
            trickle.sendall(bytes([b]))
            data = trickle.recv(4096)
            closed = data == b"" or data.startswith(b"HTTP/1.1 408")
            if closed:
                break
        except socket.timeout:
            continue
        except (BrokenPipeError, ConnectionResetError):
            closed = True
            break
    assert closed and time.monotonic() - t0 < 6, "a trickling client outlived auth_timeout"
    trickle.close()
    assert health(port, token) == 200

    # Past auth_timeout, every idle stranger is gone.
    time.sleep(2.5)
    wait_for(lambda: sockets_of(d.proc.pid) <= base + 1, timeout=5, what="the strangers to be dropped")
    for s in idle:
        s.close()


def test_oversized_header_blocks_are_refused(tcp_daemon):
    """A stranger's header block may hold 16 KiB. Seen failing before the fix: TimeoutError (evhttp
    kept reading up to its 64 KiB limit, and waited)."""
    d, port, token = tcp_daemon()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /v1/health HTTP/1.1\r\nX-Filler: " + b"a" * (20 << 10))
    answer = read_response(s)
    s.close()
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]


def test_an_authenticated_client_is_served_as_before(tcp_daemon):
    """Keep-alive requests on one connection, a request whose header block arrives in pieces with
    its body, a large upload and download, a streamed exec — over TCP with the token."""
    d, port, token = tcp_daemon()
    ep = cordon.Endpoint(url=f"http://127.0.0.1:{port}", token=token)
    with Sandbox.create(endpoint=ep) as sb:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for _ in range(5):  # one connection, several requests
            c.request("GET", f"/v1/sandboxes/{sb.id}", headers={"Authorization": f"Bearer {token}"})
            r = c.getresponse()
            assert r.status == 200 and b'"state":"running"' in r.read()
        c.close()
        s = socket.create_connection(("127.0.0.1", port))
        body = b'{"cmd": ["echo", "pieces"]}'
        head = (f"POST /v1/sandboxes/{sb.id}/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        for i in range(0, len(head), 7):
            s.sendall(head[i:i + 7])
            time.sleep(0.01)
        s.sendall(body)
        answer = read_response(s, timeout=20)
        s.close()
        assert answer.startswith(b"HTTP/1.1 200") and b'"stdout":"pieces\\n"' in answer, answer
        data = os.urandom(8 << 20)
        sb.files.write("/tmp/big", data)
        assert sb.files.read("/tmp/big") == data
        lines = [e for e in sb.exec_stream(["sh", "-c", "echo a; echo b"]) if e.get("type") == "stdout"]
        assert "".join(e["data"] for e in lines) == "a\nb\n"
    with pytest.raises(cordon.Unauthorized):
        cordon.Endpoint(url=f"http://127.0.0.1:{port}", token="wrong-token-123456").json("GET", "/v1/health")


def test_connections_in_all_are_capped(tcp_daemon):
    """max_connections counts every TCP connection, authenticated or not: one more is answered 503
    and closed; a connection that closes makes room. Before the fix there was no such cap (the
    option did not exist)."""
    d, port, token = tcp_daemon("--max-connections", "4")
    held = []
    for _ in range(4):  # authenticated, kept alive
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/v1/health", headers={"Authorization": f"Bearer {token}"})
        r = c.getresponse()
        assert r.status == 200
        r.read()
        held.append(c)
    s = socket.create_connection(("127.0.0.1", port))
    answer = read_response(s)
    s.close()
    assert answer.startswith(b"HTTP/1.1 503 ") and b"too_many_connections" in answer, answer
    status, text = d.http("GET", "/metrics")
    assert "cordon_http_tcp_connections 4" in text.decode()
    held.pop().close()
    wait_for(lambda: health(port, token) == 200, timeout=5, what="a closed connection to make room")
    for c in held:
        c.close()
