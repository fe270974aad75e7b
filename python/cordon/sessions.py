"""Shell sessions of a sandbox (…/sessions, docs/cordond.md): one shell that stays alive between
commands, so that `cd`, `export`, functions and aliases carry over.

    with sb.session() as s:
        s.run("cd /repo && export X=1")
        r = s.run("echo $X; pwd")          # r.stdout == "1\\n/repo\\n", r.exit_code == 0
        r = s.run("sleep 100", timeout_s=2)  # r.timed_out, r.exit_code == 124; the session goes on

Each run gets its own output, exit code and timeout. A command that hangs is interrupted (SIGINT);
one that does not end then has its shell restarted from the state saved after the last command
(r.restarted). `exit N` ends the shell (r.session_ended); the next run starts a new one.
"""

import base64


def _run_body(cmd, timeout_s, stdin):
    body = {"cmd": cmd, "encoding": "base64"}
    if timeout_s is not None:
        body["timeout_s"] = timeout_s
    if stdin is not None:
        body["stdin_b64"] = base64.b64encode(stdin.encode() if isinstance(stdin, str) else bytes(stdin)).decode()
    return body


def _open_body(shell, cwd, env, user):
    body = {}
    for k, v in (("shell", shell), ("cwd", cwd), ("user", user)):
        if v is not None:
            body[k] = v
    if env:
        body["env"] = dict(env)
    return body


def _result(d):
    from . import SessionResult
    return SessionResult(d)


class Session:
    """A shell session; .id ("s1"), .info (its last known state: "alive", "busy", "pid", …).
    A context manager: it is deleted on exit."""

    def __init__(self, sb, info):
        self._sb, self.id, self.info = sb, info["id"], info

    def _path(self, action=""):
        return f"{self._sb._path}/sessions/{self.id}" + (f"/{action}" if action else "")

    def run(self, cmd, timeout_s=None, stdin=None):
        """Run the shell command line cmd in the session; its SessionResult. stdin (str or bytes):
        what the command reads (without, it reads nothing: EOF at once)."""
        return _result(self._sb._ep.json("POST", self._path("run"), _run_body(cmd, timeout_s, stdin)))

    def interrupt(self):
        """Interrupt the command running now (from another thread); whether one ran."""
        return self._sb._ep.json("POST", self._path("interrupt"))["interrupted"]

    def refresh(self):
        self.info = self._sb._ep.json("GET", self._path())
        return self.info

    def close(self):
        """Delete the session: its shell and everything it started end."""
        return self._sb._ep.json("DELETE", self._path())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        from ._http import CordonError
        try:
            self.close()
        except CordonError:
            pass  # the sandbox or the session is gone already

    def __repr__(self):
        return f"Session({self.id!r}, alive={self.info.get('alive')})"


class AsyncSession(Session):
    """Session for AsyncSandbox: the same methods, as coroutines; `async with` deletes it."""

    async def run(self, cmd, timeout_s=None, stdin=None):
        """Cancelled (asyncio.wait_for, task.cancel()), it hangs up: cordond interrupts the command,
        and the session stays."""
        return _result(await self._sb._ep.ajson("POST", self._path("run"), _run_body(cmd, timeout_s, stdin)))

    async def interrupt(self):
        return (await self._sb._ep.ajson("POST", self._path("interrupt")))["interrupted"]

    async def refresh(self):
        self.info = await self._sb._ep.ajson("GET", self._path())
        return self.info

    async def close(self):
        return await self._sb._ep.ajson("DELETE", self._path())

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        from ._http import CordonError
        try:
            await self.close()
        except CordonError:
            pass
