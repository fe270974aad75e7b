"""TCP ports inside a sandbox, reached from here (…/ports/{port}, docs/cordond.md): cordond connects
to 127.0.0.1:{port} from inside the sandbox's network namespace, whatever its network mode; nothing
is exposed on the host's interfaces.

    s = sb.open_port(8000)                  # a connected socket (raw TCP through cordond)
    with sb.forward_port(8000) as fwd:      # 127.0.0.1:fwd.port here → port 8000 there
        urllib.request.urlopen(f"http://127.0.0.1:{fwd.port}/")

Plain HTTP also goes through cordond's proxy path, /v1/sandboxes/{id}/ports/{port}/PATH.
"""

import asyncio
import socket
import threading

from ._http import Unavailable, error_from

_HEAD_MAX = 16 << 10


def _request(ep, path):
    h = ep.headers({"Upgrade": "cordon-tcp", "Connection": "Upgrade"})
    h.pop("Accept", None)
    return (f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n").encode()


def _check(head, rest):
    """The answer's head (bytes up to its empty line): None for 101, else the error to raise."""
    line = head.split(b"\r\n", 1)[0].split(None, 2)
    status = int(line[1]) if len(line) > 1 and line[1].isdigit() else 0
    if status == 101:
        return None
    return error_from(status or 502, rest)


def open_tunnel(ep, path):
    """A socket connected through cordond to the sandbox's port (path: …/ports/{port})."""
    try:
        if ep.socket_path:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(ep.timeout)
            s.connect(ep.socket_path)
        else:
            s = socket.create_connection((ep.host, ep.port), timeout=ep.timeout)
    except OSError as e:
        raise Unavailable(ep.where, e) from e
    try:
        s.sendall(_request(ep, path))
        buf = b""
        while b"\r\n\r\n" not in buf:  # peeked: what follows the head stays in the socket
            more = s.recv(_HEAD_MAX, socket.MSG_PEEK)
            if not more or len(more) == len(buf) and len(more) >= _HEAD_MAX:
                break
            buf = more
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            raise error_from(502, b'{"error": {"code": "bad_response", "message": "no answer from cordond"}}')
        head = s.recv(end + 4)
        while len(head) < end + 4:
            head += s.recv(end + 4 - len(head))
        if _check(head, b"") is not None:
            body = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                body += chunk
            raise _check(head, body)
        s.settimeout(None)
        return s
    except BaseException:
        s.close()
        raise


async def aopen_tunnel(ep, path):
    """(reader, writer) of a connection through cordond to the sandbox's port."""
    try:
        if ep.socket_path:
            reader, writer = await asyncio.open_unix_connection(ep.socket_path, limit=1 << 20)
        else:
            reader, writer = await asyncio.open_connection(ep.host, ep.port, limit=1 << 20)
    except OSError as e:
        raise Unavailable(ep.where, e) from e
    try:
        writer.write(_request(ep, path))
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        err = _check(head, b"")
        if err is not None:
            raise _check(head, await reader.read())
        return reader, writer
    except BaseException:
        writer.close()
        raise


def request(ep, path, method="GET", body=None, headers=None):
    """One HTTP request through cordond's proxy path (path: …/ports/{port}/PATH): (status, headers,
    body bytes) of the sandbox server's answer, whatever its status."""
    conn = ep.connect()
    try:
        h = ep.headers(headers)
        h.pop("Accept", None)
        conn.request(method, path, body=body, headers=h)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


class PortForward:
    """A listening socket on 127.0.0.1 (.port) whose connections go to a port inside the sandbox,
    each through its own tunnel; served by a thread until close() (or the end of `with`)."""

    def __init__(self, sb, remote, local=0):
        self._sb, self.remote = sb, int(remote)
        self._path = f"{sb._path}/ports/{self.remote}"
        self._ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._ls.bind(("127.0.0.1", int(local)))
        self._ls.listen(64)
        self.port = self._ls.getsockname()[1]
        self._closed = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._closed:
            try:
                c, _ = self._ls.accept()
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(c,), daemon=True).start()

    def _pipe(self, c):
        try:
            t = open_tunnel(self._sb._ep, self._path)
        except Exception:
            c.close()
            return

        def one_way(a, b):
            try:
                while True:
                    data = a.recv(65536)
                    if not data:
                        break
                    b.sendall(data)
            except OSError:
                pass
            try:
                b.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        back = threading.Thread(target=one_way, args=(t, c), daemon=True)
        back.start()
        one_way(c, t)
        back.join()
        c.close()
        t.close()

    def close(self):
        self._closed = True
        try:
            self._ls.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._ls.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
