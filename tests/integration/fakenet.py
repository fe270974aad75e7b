"""A fake internet for the egress tests: a network namespace of the test's own,
joined to the host by a veth, holding our own HTTP, TLS, DNS and UDP servers.
No test traffic goes anywhere else.

  host  cdnt-inet (203.0.113.1/24)  <->  namespace: 203.0.113.2/24 plus
        .10  HTTP on 80 and 8080 ("pypi.test", "evil.test" share it), UDP 443 sink;
             on 8081 a lenient keep-alive HTTP server (see keepalive_server)
        .11  TLS on 443 (self-signed; any SNI)
        .53  DNS on 53 (the daemon's upstream; answers from NAMES)
        .66  HTTP on 80 and TLS on 443 ("a forbidden server")
        10.99.0.10  HTTP on 80 (a private address: reserved unless an entry inside 10/8 names it)

Run as a module inside the namespace (`python3 fakenet.py serve DIR`), it
serves until killed and logs every connection or datagram it receives as
JSON lines to DIR/hits.log, so tests can prove that something never arrived.
"""

import json
import os
import shutil
import signal
import socket
import socketserver
import ssl
import struct
import subprocess
import sys
import threading
import time

NETNS_DIR = "/proc/{}/ns/net"
HOST_IF = "cdnt-inet"
HOST_IP = "203.0.113.1"
ADDRS = ["203.0.113.2", "203.0.113.10", "203.0.113.11", "203.0.113.53", "203.0.113.66"]
PRIVATE = "10.99.0.10"  # a "private" server of the fake internet (routed by the host through our veth)
DNS_IP = "203.0.113.53"

# name -> list of A records the fake upstream DNS answers
NAMES = {
    "pypi.test": ["203.0.113.10"],
    "files.pypi.test": ["203.0.113.10"],
    "secure.test": ["203.0.113.11"],
    "evil.test": ["203.0.113.66"],
    "rebind.test": ["169.254.169.254"],
    "mixed.test": ["10.0.0.7", "203.0.113.10"],
    "slow.test": ["203.0.113.10"],  # answered after SLOW_S
}
SLOW_S = 1.5


# ---------------------------------------------------------------- servers ---

class Hits:
    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()

    def log(self, **kw):
        kw["t"] = time.time()
        with self.lock, open(self.path, "a") as f:
            f.write(json.dumps(kw) + "\n")


def http_server(hits, ip, port, tls_ctx=None):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((ip, port))
    srv.listen(64)

    def handle(conn, peer):
        try:
            sni = None
            if tls_ctx:
                conn = tls_ctx.wrap_socket(conn, server_side=True)
                sni = getattr(conn, "cordon_sni", None)
            conn.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            head = data.split(b"\r\n\r\n")[0].decode("latin-1")
            lines = head.split("\r\n")
            host = ""
            for ln in lines[1:]:
                if ln.lower().startswith("host:"):
                    host = ln.split(":", 1)[1].strip()
            hits.log(kind="tls" if tls_ctx else "http", ip=ip, port=port, peer=peer[0],
                     request=lines[0] if lines else "", host=host, head=head)
            path = lines[0].split(" ")[1] if lines and " " in lines[0] else "/"
            if path.startswith("/slow"):
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
                for _ in range(600):
                    conn.sendall(b"tick\n")
                    time.sleep(0.1)
                return
            body = ("hello from %s:%d host=%s\n" % (ip, port, host)).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n%s" % (len(body), body))
        except Exception as e:  # a client that goes away is not an error here
            hits.log(kind="error", ip=ip, port=port, error=str(e))
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def loop():
        while True:
            c, peer = srv.accept()
            threading.Thread(target=handle, args=(c, peer), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()


def read_head(conn, buf):
    """The next request head, with bare LF taken as a line end (as many servers do); (head, rest)."""
    while True:
        ends = [(i, i + len(sep)) for sep in (b"\r\n\r\n", b"\n\n", b"\n\r\n") if (i := buf.find(sep)) >= 0]
        if ends:
            i, j = min(ends)
            return buf[:i].decode("latin-1"), buf[j:]
        chunk = conn.recv(65536)
        if not chunk:
            return None, buf
        buf += chunk


def read_exact(conn, buf, n):
    while len(buf) < n:
        chunk = conn.recv(65536)
        if not chunk:
            raise EOFError
        buf += chunk
    return buf[:n], buf[n:]


def read_line(conn, buf):
    while b"\n" not in buf:
        chunk = conn.recv(65536)
        if not chunk:
            raise EOFError
        buf += chunk
    i = buf.index(b"\n")
    return buf[:i].rstrip(b"\r"), buf[i + 1:]


def keepalive_server(hits, ip, port):
    """A server of the kind item 13 of issue 18 was about: it keeps every
    connection open whatever "Connection: close" says, answers pipelined
    requests in turn, reads a bare LF as a line end, frames content by
    Transfer-Encoding before Content-Length, and ignores content on GET and
    HEAD (so such content is read as the next request: a CL.0 desync). Every
    head it reads is logged (kind "keepalive"), so a test sees each request
    that reached it and the Host it named."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((ip, port))
    srv.listen(64)

    def handle(conn, peer):
        buf = b""
        try:
            conn.settimeout(10)
            while True:
                head, buf = read_head(conn, buf)
                if head is None:
                    return
                lines = [ln.rstrip("\r") for ln in head.split("\n")]
                fields = {}
                for ln in lines[1:]:
                    if ":" in ln:
                        k, v = ln.split(":", 1)
                        fields.setdefault(k.strip().lower(), v.strip())
                host = fields.get("host", "")
                hits.log(kind="keepalive", ip=ip, port=port, peer=peer[0], request=lines[0], host=host, head=head)
                method = lines[0].split(" ")[0]
                if method not in ("GET", "HEAD"):
                    if "chunked" in fields.get("transfer-encoding", "").lower():
                        while True:
                            size, buf = read_line(conn, buf)
                            n = int(size.split(b";")[0], 16)
                            if n == 0:
                                while True:
                                    t, buf = read_line(conn, buf)
                                    if not t:
                                        break
                                break
                            _, buf = read_exact(conn, buf, n + 2)
                    elif fields.get("content-length", "").isdigit():
                        _, buf = read_exact(conn, buf, int(fields["content-length"]))
                body = ("keepalive %s:%d host=%s\n" % (ip, port, host)).encode()
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(body), body))
        except Exception as e:  # a client that goes away, or a framing it cannot read
            hits.log(kind="error", ip=ip, port=port, error=str(e))
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def loop():
        while True:
            c, peer = srv.accept()
            threading.Thread(target=handle, args=(c, peer), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()


def udp_sink(hits, ip, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((ip, port))

    def loop():
        while True:
            data, peer = s.recvfrom(65535)
            hits.log(kind="udp", ip=ip, port=port, peer=peer[0], size=len(data))
            s.sendto(b"pong", peer)

    threading.Thread(target=loop, daemon=True).start()


def dns_answer(query):
    """A minimal authoritative answer for one A/AAAA question."""
    tid, flags, qd = struct.unpack("!HHH", query[:6])
    pos, labels = 12, []
    while query[pos]:
        n = query[pos]
        labels.append(query[pos + 1:pos + 1 + n].decode("ascii", "replace"))
        pos += 1 + n
    qtype, _qclass = struct.unpack("!HH", query[pos + 1:pos + 5])
    question = query[12:pos + 5]
    name = ".".join(labels).lower()
    answers = []
    rcode = 0
    if name == "fail.test":
        rcode = 2
    elif name not in NAMES:
        rcode = 3
    elif qtype == 1:
        for ip in NAMES[name]:
            answers.append(b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 30, 4) + socket.inet_aton(ip))
    hdr = struct.pack("!HHHHHH", tid, 0x8400 | rcode, 1, len(answers), 0, 0)
    return name, qtype, hdr + question + b"".join(answers)


def dns_server(hits, ip):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((ip, 53))

    def loop():
        while True:
            data, peer = s.recvfrom(4096)
            try:
                name, qtype, reply = dns_answer(data)
            except Exception:
                continue
            hits.log(kind="dns", ip=ip, peer=peer[0], name=name, qtype=qtype)
            if name == "slow.test":
                threading.Timer(SLOW_S, s.sendto, (reply, peer)).start()
            else:
                s.sendto(reply, peer)

    threading.Thread(target=loop, daemon=True).start()


def serve(d):
    hits = Hits(os.path.join(d, "hits.log"))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(d, "cert.pem"), os.path.join(d, "key.pem"))
    http_server(hits, "203.0.113.10", 80)
    http_server(hits, "203.0.113.10", 8080)
    keepalive_server(hits, "203.0.113.10", 8081)
    http_server(hits, "203.0.113.66", 80)
    http_server(hits, PRIVATE, 80)
    http_server(hits, "203.0.113.11", 443, ctx)
    http_server(hits, "203.0.113.66", 443, ctx)
    udp_sink(hits, "203.0.113.10", 443)
    udp_sink(hits, "203.0.113.10", 9999)
    dns_server(hits, DNS_IP)
    open(os.path.join(d, "ready"), "w").close()
    signal.sigwait([signal.SIGTERM, signal.SIGINT])


# ------------------------------------------------------------ test side ---

class FakeNet:
    """The namespace, the veth and the server process; stop() removes all."""

    def __init__(self, workdir):
        self.dir = workdir
        self.proc = None

    def start(self):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=secure.test", "-keyout", os.path.join(self.dir, "key.pem"),
                        "-out", os.path.join(self.dir, "cert.pem")], check=True, capture_output=True)
        # The servers' process makes its own network namespace (unshare) and waits
        # for us to give it the veth's other end.
        self.proc = subprocess.Popen(
            ["unshare", "--net", "--", sys.executable, os.path.abspath(__file__), "serve-after-setup",
             self.dir], stdin=subprocess.PIPE)
        time.sleep(0.05)
        pid = self.proc.pid
        for _ in range(100):  # unshare has exec'd python by now when its ns differs from ours
            if os.readlink(NETNS_DIR.format(pid)) != os.readlink(NETNS_DIR.format(os.getpid())):
                break
            time.sleep(0.02)
        subprocess.run(["ip", "link", "del", HOST_IF], capture_output=True)
        subprocess.run(["ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", "eth0", "netns",
                        str(pid)], check=True)
        subprocess.run(["ip", "addr", "add", HOST_IP + "/24", "dev", HOST_IF], check=True)
        subprocess.run(["ip", "link", "set", HOST_IF, "up"], check=True)
        subprocess.run(["ip", "route", "add", PRIVATE + "/32", "via", "203.0.113.2", "dev", HOST_IF], check=True)
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()
        ready = os.path.join(self.dir, "ready")
        for _ in range(200):
            if os.path.exists(ready):
                return self
            time.sleep(0.05)
        raise RuntimeError("fake internet did not start")

    def stop(self):
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        subprocess.run(["ip", "link", "del", HOST_IF], capture_output=True)

    def hits(self, **match):
        out = []
        try:
            with open(os.path.join(self.dir, "hits.log")) as f:
                for line in f:
                    h = json.loads(line)
                    if all(h.get(k) == v for k, v in match.items()):
                        out.append(h)
        except FileNotFoundError:
            pass
        return out


def setup_inside():
    """In the new namespace, once the host has moved eth0 here."""
    sys.stdin.readline()
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for a in ADDRS:
        subprocess.run(["ip", "addr", "add", a + "/24", "dev", "eth0"], check=True)
    subprocess.run(["ip", "addr", "add", PRIVATE + "/32", "dev", "eth0"], check=True)
    subprocess.run(["ip", "link", "set", "eth0", "up"], check=True)
    subprocess.run(["ip", "route", "add", "default", "via", HOST_IP], check=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve-after-setup":
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM, signal.SIGINT])
        setup_inside()
        serve(sys.argv[2])
