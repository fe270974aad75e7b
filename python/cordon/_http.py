"""HTTP/1.1 to cordond over a unix socket or TCP, standard library only.

The sync side uses http.client; the async side speaks the little HTTP/1.1 it
needs over asyncio streams (Content-Length and chunked bodies), so that one
process can drive thousands of sandboxes without a thread each."""

import asyncio
import http.client
import json
import os
import socket
import urllib.parse

DEFAULT_SOCKET = "/run/cordon/cordond.sock"


class CordonError(Exception):
    """An error answered by cordond: .status (HTTP), .code, .message, .field."""

    def __init__(self, status, code, message, field=None):
        super().__init__(f"{code}: {message}" + (f" (field: {field})" if field else ""))
        self.status, self.code, self.message, self.field = status, code, message, field


class InvalidArgument(CordonError):
    """400: a field of the request is wrong; .field names it."""


class Unauthorized(CordonError):
    """401: TCP without the right bearer token."""


class NotFound(CordonError):
    """404: no such sandbox, route or file."""


class SandboxNotRunning(CordonError):
    """409: the sandbox has ended (its lifetime ran out, its init died)."""


class SandboxEnded(SandboxNotRunning):
    """410 (code "sandbox_ended"): the sandbox ended (its lifetime or idle timeout ran out, its init
    died, it was killed on a violation); .exit_reason says why. Its record (info, events,
    violations) stays readable for cordond's retention, then it is NotFound."""

    def __init__(self, status, code, message, field=None, exit_reason=None):
        super().__init__(status, code, message, field)
        self.exit_reason = exit_reason


class ImageInUse(CordonError):
    """409 (code "image_in_use"): a live sandbox runs on the image; delete the sandboxes first."""


class FileExists(CordonError):
    """409 (code "exists" or "not_empty"): a rename with overwrite=False found its destination, or
    would replace a directory that is not empty."""


class SessionBusy(CordonError):
    """409 (code "session_busy"): the session runs a command; wait for it, or interrupt it."""


class PullFailed(CordonError):
    """A pull that the registry or the image refused (502), or that ended as cordond stopped (503)."""


class TooManySandboxes(CordonError):
    """429: the daemon's max_sandboxes is reached."""


class Forbidden(CordonError):
    """403: the sandbox refuses it: a read-only path, a kernel file system (/proc, /sys), or
    (code "protected_path") a path that an agent's symlink leads into a protected path."""


class TooLarge(CordonError):
    """413: over a size limit; .field names it ("max_bytes": a file longer than the read's limit)."""


class Unavailable(CordonError):
    """cordond cannot be reached: no socket at the path, nobody listening, no permission, a refused or
    unreachable TCP address. .status 0, .code "unavailable"; the message names the socket path or URL
    and the OS's reason, .reason is the OSError."""

    def __init__(self, where, reason):
        super().__init__(0, "unavailable", f"cannot reach cordond at {where}: {_why(reason)}")
        self.where, self.reason = where, reason


class ConnectionLost(CordonError):
    """cordond's connection ended before its whole answer (cordond stopped or crashed, the connection
    was reset). .status 0, .code "connection_lost"; the message names the socket path or URL."""

    def __init__(self, where, reason):
        super().__init__(0, "connection_lost", f"the connection to cordond at {where} ended before its answer did: "
                                               f"{_why(reason)}")
        self.where, self.reason = where, reason


class IncompleteRead(ConnectionLost):
    """A download that ended before its last byte (the file grew past the limit, the sandbox ended)."""

    def __init__(self, status, code, message, field=None):
        CordonError.__init__(self, status, code, message, field)
        self.where = self.reason = None


def _why(reason):
    """The OS's words for reason (asyncio words a refused connect its own way)."""
    if isinstance(reason, http.client.RemoteDisconnected) or (
            isinstance(reason, asyncio.IncompleteReadError) and not reason.partial):
        return "closed without an answer"
    if isinstance(reason, (http.client.IncompleteRead, asyncio.IncompleteReadError)):
        return "closed in the middle of the answer"
    if isinstance(reason, OSError) and reason.errno:
        return os.strerror(reason.errno)
    return str(reason) or type(reason).__name__


class ExecError(InvalidArgument):
    """The command could not be started (not found, not executable, bad cwd)."""


class ServerError(CordonError):
    """5xx."""


def error_from(status, body):
    try:
        e = json.loads(body)["error"]
        code, message, field = e.get("code", "error"), e.get("message", ""), e.get("field")
    except (ValueError, KeyError, TypeError, AttributeError):
        e, code, message, field = {}, "http_error", (body or b"").decode("utf-8", "replace")[:500], None
    if status == 410:
        return SandboxEnded(status, code, message, field, e.get("exit_reason"))
    if status == 403:  # whatever its code ("protected_path", "invalid_ref", …)
        cls = Forbidden
    elif code == "exec_failed":
        cls = ExecError
    elif code == "image_in_use":
        cls = ImageInUse
    elif code == "session_busy":
        cls = SessionBusy
    elif code in ("exists", "not_empty") and status == 409:
        cls = FileExists
    elif code in ("pull_failed", "stopping") and status in (502, 503):
        cls = PullFailed
    else:
        cls = {400: InvalidArgument, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: SandboxNotRunning,
               413: TooLarge, 429: TooManySandboxes}.get(status, ServerError if status >= 500 else CordonError)
    return cls(status, code, message, field)


class Endpoint:
    """Where cordond is: a unix socket path (default $CORDON_SOCKET or
    /run/cordon/cordond.sock) or a URL http://HOST:PORT with a token."""

    def __init__(self, socket_path=None, url=None, token=None, timeout=None):
        self.url = url
        self.token = token
        self.timeout = timeout
        self.socket_path = None
        if url:
            u = urllib.parse.urlsplit(url)
            if u.scheme != "http" or not u.hostname:
                raise ValueError(f"url: expected http://HOST:PORT, got {url!r}")
            self.host, self.port = u.hostname, u.port or 80
        else:
            self.socket_path = socket_path or os.environ.get("CORDON_SOCKET") or DEFAULT_SOCKET

    def headers(self, extra=None):
        h = {"Host": "cordond", "Accept": "application/json"}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        h.update(extra or {})
        return h

    @property
    def where(self):
        """The socket path or the URL, for messages."""
        return self.socket_path or self.url

    # ---- sync ----
    def connection(self):
        if self.socket_path:
            return _UnixConnection(self.socket_path, self.timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def connect(self):
        """A connected connection; Unavailable when cordond cannot be reached (a connect that
        takes longer than timeout= too)."""
        conn = self.connection()
        try:
            conn.connect()
        except OSError as e:
            conn.close()
            raise Unavailable(self.where, e) from e
        return conn

    def lines(self, resp):
        """The non-empty lines of a streamed (NDJSON) response, which is closed at the end, on an
        error or when the caller stops early; ConnectionLost if cordond's connection ends first."""
        try:
            for line in resp:
                if line.strip():
                    yield line
            if cut_short(resp):
                raise http.client.IncompleteRead(b"")
        except _LOST as e:
            raise ConnectionLost(self.where, e) from e
        finally:
            resp.close()
            resp._cordon_conn.close()

    def request(self, method, path, body=None, headers=None, stream=False):
        """Returns (status, bytes) or, with stream=True and a 2xx, the open response."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            headers = dict(headers or {}, **{"Content-Type": "application/json"})
        conn = self.connect()
        try:
            conn.request(method, path, body=body, headers=self.headers(headers))
            resp = conn.getresponse()
            if stream and resp.status < 300:
                resp._cordon_conn = conn  # closed with the response
                return resp.status, resp
            data = resp.read()
        except _LOST as e:
            conn.close()
            raise ConnectionLost(self.where, e) from e
        except BaseException:
            conn.close()
            raise
        conn.close()
        if resp.status >= 300:
            raise error_from(resp.status, data)
        return resp.status, data

    def json(self, method, path, body=None):
        _, data = self.request(method, path, body)
        return json.loads(data) if data else None

    # ---- async ----
    async def arequest(self, method, path, body=None, headers=None):
        """(status, bytes); raises CordonError for >= 300. Cancelled, it closes its connection at
        once: cordond ends a buffered exec whose client hung up."""
        status, resp_headers, reader, writer = await self._astart(method, path, body, headers)
        try:
            data = b"".join([chunk async for chunk in self._abody(reader, resp_headers)])
        finally:
            writer.close()
        if status >= 300:
            raise error_from(status, data)
        return status, data

    async def ajson(self, method, path, body=None):
        _, data = await self.arequest(method, path, body)
        return json.loads(data) if data else None

    async def astream(self, method, path, body=None):
        """Yields body chunks as they arrive (for NDJSON streams)."""
        status, headers, reader, writer = await self._astart(method, path, body, None)
        try:
            if status >= 300:
                data = b"".join([c async for c in self._abody(reader, headers)])
                raise error_from(status, data)
            async for chunk in self._abody(reader, headers):
                yield chunk
        finally:
            writer.close()

    async def _abody(self, reader, headers):
        try:
            async for chunk in _body_chunks(reader, headers):
                yield chunk
        except _LOST as e:
            raise ConnectionLost(self.where, e) from e

    async def _astart(self, method, path, body, headers):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            headers = dict(headers or {}, **{"Content-Type": "application/json"})
        body = body or b""
        try:
            if self.socket_path:
                reader, writer = await asyncio.open_unix_connection(self.socket_path, limit=1 << 24)
            else:
                reader, writer = await asyncio.open_connection(self.host, self.port, limit=1 << 24)
        except OSError as e:
            raise Unavailable(self.where, e) from e
        h = self.headers(headers)
        h["Content-Length"] = str(len(body))
        h["Connection"] = "close"
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
        try:  # the connection is ours until it is returned: closed on any way out, cancellation too
            writer.write(head.encode() + body)
            await writer.drain()
            status_line = await reader.readline()
            if not status_line.endswith(b"\n"):
                raise asyncio.IncompleteReadError(status_line, None)
            parts = status_line.split(None, 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
                raise ServerError(0, "bad_response", f"not an HTTP response: {status_line[:80]!r}")
            resp_headers = {}
            while True:
                line = await reader.readline()
                if not line.endswith(b"\n"):
                    raise asyncio.IncompleteReadError(line, None)
                if line in (b"\r\n", b"\n"):
                    break
                k, _, v = line.decode("latin-1").partition(":")
                resp_headers[k.strip().lower()] = v.strip()
            return int(parts[1]), resp_headers, reader, writer
        except _LOST as e:
            writer.close()
            raise ConnectionLost(self.where, e) from e
        except BaseException:
            writer.close()
            raise


async def _body_chunks(reader, headers):
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size_line = await reader.readline()
            if not size_line.endswith(b"\n"):  # the connection ended before the last chunk
                raise asyncio.IncompleteReadError(size_line, None)
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                return
            chunk = await reader.readexactly(size)
            await reader.readline()
            yield chunk
    elif "content-length" in headers:
        n = int(headers["content-length"])
        if n:
            yield await reader.readexactly(n)
    else:
        data = await reader.read()
        if data:
            yield data


async def alines(stream):
    """The non-empty lines of an NDJSON body's chunks; the stream (Endpoint.astream) is closed
    however the caller leaves, so its connection is too."""
    buf = b""
    try:
        async for chunk in stream:
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.strip():
                    yield line
        if buf.strip():
            yield buf
    finally:
        await stream.aclose()


def cut_short(resp):
    """Whether an http.client response whose reads came to an end (b"") lost its end: its
    connection closed before the last chunk (http.client's readline and read(n) then answer b""
    rather than raise) or before Content-Length bytes. chunk_left is None after the last chunk."""
    return resp.chunk_left is not None if resp.chunked else bool(resp.length)


# A connection that ends in the middle of a request or an answer: ConnectionError (reset, broken
# pipe, aborted; http.client's RemoteDisconnected is one), a body cut short, no status line.
_LOST = (ConnectionError, http.client.IncompleteRead, http.client.BadStatusLine, asyncio.IncompleteReadError)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=None):
        super().__init__("cordond", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s
