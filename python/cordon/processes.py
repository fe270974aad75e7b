"""Background processes of a sandbox (…/processes, docs/cordond.md): started without waiting,
addressed by their pid in the sandbox, reachable again from any client until they are deleted.

    p = sb.start("python3 -m http.server 8000", keep_stdin=False)
    for ev in p.follow():           # what it printed since it started (bounded), then live
        ...                         # {"type": "stdout"|"stderr", "data", "pos"}; last {"type": "exit", …}
    p.signal("SIGTERM"); p.wait(timeout=10)
"""

import base64
import json
import time
import urllib.parse

_LONG_POLL = 240.0  # seconds of one wait request: cordond drops a connection idle for 300


def _poll(ep, deadline):
    """Seconds of the next wait request: within cordond's idle limit, the endpoint's own timeout and
    what is left of the caller's."""
    left = _LONG_POLL if ep.timeout is None else max(min(_LONG_POLL, ep.timeout - 1), 0.5)
    return left if deadline is None else min(left, max(deadline - time.monotonic(), 0.001))


def _decode(ev):
    if "data_b64" in ev:
        ev["data_bytes"] = base64.b64decode(ev.pop("data_b64"))
        ev["data"] = ev["data_bytes"].decode("utf-8", "replace")
    return ev


def _output_query(since, follow):
    q = {"encoding": "base64"}
    if since:
        q["since"] = str(int(since))
    if follow:
        q["follow"] = "true"
    return "output?" + urllib.parse.urlencode(q)


def _stdin_query(eof):
    return "stdin?eof=true" if eof else "stdin"


class Process:
    """A background process; .pid, .info (its last known state: "running", "exit_code", …)."""

    def __init__(self, sb, info):
        self._sb, self.pid, self.info = sb, info["pid"], info

    def _path(self, action=""):
        return f"{self._sb._path}/processes/{self.pid}" + (f"/{action}" if action else "")

    @property
    def running(self):
        return self.info.get("running", False)

    @property
    def exit_code(self):
        return self.info.get("exit_code")

    def refresh(self):
        self.info = self._sb._ep.json("GET", self._path())
        return self.info

    def output(self, since=0):
        """What it printed from position since (0: what is still kept): {"output": [events], "dropped",
        "output_next", "running", …}; each event's "data_bytes" holds the exact bytes."""
        o = self._sb._ep.json("GET", self._path(_output_query(since, False)))
        o["output"] = [_decode(e) for e in o.get("output", [])]
        self.info = {k: v for k, v in o.items() if k not in ("output", "dropped")}
        return o

    def follow(self, since=0):
        """Yield its output from position since, then live, until {"type": "exit", …} (or "cut": this
        client fell 4 MiB behind; come back with since=the last pos + len)."""
        _, resp = self._sb._ep.request("GET", self._path(_output_query(since, True)), stream=True)
        lines = self._sb._ep.lines(resp)
        try:
            for line in lines:
                ev = _decode(json.loads(line))
                if ev.get("type") in ("exit", "cut"):
                    self.info = {k: v for k, v in ev.items() if k != "type"}
                yield ev
        finally:
            lines.close()

    def send_stdin(self, data, eof=False):
        """Write to its stdin (started with keep_stdin=True or a pty); eof=True closes it after."""
        data = data.encode() if isinstance(data, str) else bytes(data)
        _, body = self._sb._ep.request("POST", self._path(_stdin_query(eof)), data,
                                       {"Content-Type": "application/octet-stream"})
        return json.loads(body)

    def close_stdin(self):
        return self.send_stdin(b"", eof=True)

    def signal(self, sig):
        """Any signal: a number, or a name ("SIGTERM", "INT")."""
        self.info = self._sb._ep.json("POST", self._path("signal"), {"signal": sig})
        return self.info

    def kill(self):
        return self.signal("SIGKILL")

    def resize(self, rows, cols):
        self.info = self._sb._ep.json("POST", self._path("resize"), {"rows": rows, "cols": cols})
        return self.info

    def wait(self, timeout=None):
        """Its info once it ended; with timeout (seconds), TimeoutError if it still runs by then."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:  # each request within cordond's idle limit for a connection
            left = _poll(self._sb._ep, deadline)
            self.info = self._sb._ep.json("GET", self._path("wait") + f"?timeout_s={left!r}")
            if not self.info.get("running"):
                return self.info
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"process {self.pid} still runs after {timeout} s")

    def delete(self):
        """Forget it (killed first if it still runs)."""
        return self._sb._ep.json("DELETE", self._path())

    def __repr__(self):
        return f"Process({self.pid}, running={self.running})"


class AsyncProcess(Process):
    """Process for AsyncSandbox: the same methods, as coroutines (follow: an async iterator)."""

    async def refresh(self):
        self.info = await self._sb._ep.ajson("GET", self._path())
        return self.info

    async def output(self, since=0):
        o = await self._sb._ep.ajson("GET", self._path(_output_query(since, False)))
        o["output"] = [_decode(e) for e in o.get("output", [])]
        self.info = {k: v for k, v in o.items() if k not in ("output", "dropped")}
        return o

    async def follow(self, since=0):
        from ._http import alines
        lines = alines(self._sb._ep.astream("GET", self._path(_output_query(since, True))))
        try:
            async for line in lines:
                ev = _decode(json.loads(line))
                if ev.get("type") in ("exit", "cut"):
                    self.info = {k: v for k, v in ev.items() if k != "type"}
                yield ev
        finally:
            await lines.aclose()

    async def send_stdin(self, data, eof=False):
        data = data.encode() if isinstance(data, str) else bytes(data)
        _, body = await self._sb._ep.arequest("POST", self._path(_stdin_query(eof)), data,
                                              {"Content-Type": "application/octet-stream"})
        return json.loads(body)

    async def close_stdin(self):
        return await self.send_stdin(b"", eof=True)

    async def signal(self, sig):
        self.info = await self._sb._ep.ajson("POST", self._path("signal"), {"signal": sig})
        return self.info

    async def kill(self):
        return await self.signal("SIGKILL")

    async def resize(self, rows, cols):
        self.info = await self._sb._ep.ajson("POST", self._path("resize"), {"rows": rows, "cols": cols})
        return self.info

    async def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = _poll(self._sb._ep, deadline)
            self.info = await self._sb._ep.ajson("GET", self._path("wait") + f"?timeout_s={left!r}")
            if not self.info.get("running"):
                return self.info
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"process {self.pid} still runs after {timeout} s")

    async def delete(self):
        return await self._sb._ep.ajson("DELETE", self._path())
