"""Background processes (issue 21, point 1): started without waiting, a pid at once, listed, their
output kept (bounded) for any client that comes back, stdin written in pieces and closed, any
signal, a terminal resized, waited for; through the SDK, sync and async, on every tier."""

import asyncio
import time

import pytest

import cordon
from cordon import AsyncSandbox, Endpoint, Sandbox


def text_of(events, kind=None):
    return "".join(e["data"] for e in events if e["type"] in ("stdout", "stderr") and kind in (None, e["type"]))


def test_a_background_process_answers_at_once_and_is_kept(daemon, tier):
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        t = time.monotonic()
        p = sb.start("echo out; echo err >&2; sleep 1; echo done")
        assert time.monotonic() - t < 1.0 and p.pid > 1 and p.running, p.info
        assert p.info["cmd"] == "sh" and p.info["argv"][:2] == ["sh", "-c"], p.info
        assert [q.pid for q in sb.processes()] == [p.pid]
        # the pid is the sandbox's own
        assert "echo done" in sb.exec(f"tr '\\0' ' ' < /proc/{p.pid}/cmdline").stdout
        info = p.wait(timeout=60)
        assert info["exit_code"] == 0 and not info["running"] and info["ended_at"] >= info["started_at"], info
        out = p.output()
        assert text_of(out["output"], "stdout") == "out\ndone\n" and text_of(out["output"], "stderr") == "err\n"
        assert not out["dropped"] and out["output_next"] == len("out\nerr\ndone\n"), out
        positions = [e["pos"] for e in out["output"]]
        assert positions == sorted(positions) and positions[0] == 0
        # from a position: only what came after it
        assert text_of(p.output(since=4)["output"]) == "err\ndone\n"
        ev = [e for e in sb.events() if e["type"] == "exec" and e.get("background")]
        assert len(ev) == 1 and ev[0]["pid"] == p.pid and ev[0]["exit_code"] == 0, ev
        # forgotten on request
        p.delete()
        with pytest.raises(cordon.NotFound):
            sb.process(p.pid)
        assert sb.processes() == []


def test_stdin_signals_and_exit_statuses(daemon, tier):
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        p = sb.start(["cat"], keep_stdin=True)
        p.send_stdin("hello ")
        p.send_stdin(b"world\n")
        got = ""
        for ev in p.follow():
            got += ev.get("data", "")
            if "world" in got:
                break
        assert got == "hello world\n"
        assert p.close_stdin()["stdin_open"] is False
        assert p.wait(timeout=30)["exit_code"] == 0
        with pytest.raises(cordon.CordonError) as e:
            p.send_stdin("late")
        assert e.value.status == 409 and e.value.code == "process_ended", e.value
        # any signal: the process decides what it means
        p = sb.start("trap 'echo got TERM; exit 3' TERM; while :; do sleep 0.1; done")
        time.sleep(0.3)  # the trap is set
        p.signal("SIGTERM")
        info = p.wait(timeout=30)
        assert info["exit_code"] == 3 and "got TERM" in text_of(p.output()["output"]), info
        p = sb.start(["sleep", "600"])
        p.kill()
        info = p.wait(timeout=30)
        assert (info["exit_code"], info["signal"]) == (137, 9), info
        # its own timeout
        p = sb.start(["sleep", "600"], timeout_s=0.5)
        info = p.wait(timeout=30)
        assert info["timed_out"] and info["exit_code"] == 124, info
        with pytest.raises(TimeoutError):
            sb.start(["sleep", "600"]).wait(timeout=0.3)
        with pytest.raises(cordon.InvalidArgument) as e:
            sb.process(p.pid).signal("SIGNOTHING")
        assert e.value.field == "signal"


def test_output_is_bounded_and_any_client_comes_back_for_it(daemon, tier):
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        p = sb.start("head -c 3000000 /dev/zero | tr '\\0' a; echo; echo end")
        p.wait(timeout=120)
        # another client, as a harness that restarted would be
        again = Sandbox.connect(sb.id, endpoint=Endpoint(daemon.socket)).process(p.pid)
        out = again.output()
        kept = "".join(e["data"] for e in out["output"])
        assert out["dropped"] and out["output_next"] == 3000000 + len("\nend\n"), out["output_next"]
        assert kept.endswith("aaa\nend\n") and len(kept) <= 1 << 20, len(kept)
        follow = list(again.follow())  # an ended one: what is kept, "dropped", then its exit
        assert follow[0]["type"] == "dropped" and follow[-1]["type"] == "exit" and follow[-1]["exit_code"] == 0
        # a process that outputs without end does not hold up cordond or the sandbox
        noisy = sb.start("yes")
        time.sleep(1)
        assert sb.exec("echo ok").stdout == "ok\n"
        assert noisy.output()["output_next"] > 1 << 20
        noisy.kill()


def test_a_terminal_process(daemon, tier):
    if tier == "process":
        pytest.skip("the process tier has no terminal (docs/spec.md, limits.ptys)")
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        p = sb.start(["sh"], pty=(24, 80))
        assert p.info["pty"] and p.info["stdin_open"]
        p.send_stdin("stty size\n")
        deadline = time.monotonic() + 30
        while "24 80" not in text_of(p.output()["output"]) and time.monotonic() < deadline:
            time.sleep(0.05)  # the shell answered at its first size before the resize
        p.resize(30, 100)
        p.send_stdin("stty size; exit 7\n")
        info = p.wait(timeout=30)
        out = text_of(p.output()["output"])
        assert "24 80" in out and "30 100" in out and info["exit_code"] == 7, (out, info)
        with pytest.raises(cordon.CordonError) as e:
            sb.start(["true"]).resize(10, 10)
        assert e.value.code in ("no_terminal", "process_ended"), e.value


def test_errors_name_what_is_wrong(daemon):
    with Sandbox.create(endpoint=daemon.endpoint) as sb:
        with pytest.raises(cordon.ExecError):
            sb.start(["/nonexistent"])
        assert sb.processes() == []  # a process that never ran leaves no record
        with pytest.raises(cordon.NotFound):
            sb.process(424242)
        for body, field in (({"cmd": ["true"], "background": True, "stream": True}, "stream"),
                            ({"cmd": ["true"], "keep_stdin": True}, "keep_stdin"),
                            ({"cmd": ["true"], "background": "yes"}, "background")):
            status, r = daemon.http("POST", f"/v1/sandboxes/{sb.id}/exec", body)
            assert status == 400 and r["error"]["field"] == field, r
        p = sb.start(["sleep", "600"])
        for path, method, field in ((f"output?since=-1", "GET", "since"), ("output?encoding=hex", "GET", "encoding"),
                                    ("wait?timeout_s=0", "GET", "timeout_s"), ("resize", "POST", "rows")):
            status, r = daemon.http(method, f"/v1/sandboxes/{sb.id}/processes/{p.pid}/{path}",
                                    b"{}" if method == "POST" else None)
            assert status == 400 and r["error"]["field"] == field, (path, r)
        status, r = daemon.http("POST", f"/v1/sandboxes/{sb.id}/processes/{p.pid}/stdin", b"x")
        assert status == 409 and r["error"]["code"] == "stdin_closed", r
        status, r = daemon.http("GET", f"/v1/sandboxes/{sb.id}/processes/{p.pid}/nothing")
        assert status == 404, r
        # 64 records at most: the oldest that ended make room; all running: 429
        for _ in range(70):
            sb.start(["true"]).wait(timeout=30)
        assert len(sb.processes()) <= 64
        # the sandbox's end ends them, and its delete their records
        sb.kill()


def test_async_processes(daemon):
    async def main():
        async with await AsyncSandbox.create(endpoint=daemon.endpoint) as sb:
            p = await sb.start(["cat"], keep_stdin=True)
            await p.send_stdin("async\n", eof=True)
            info = await p.wait(timeout=30)
            assert info["exit_code"] == 0
            assert [e["data"] async for e in p.follow() if e["type"] == "stdout"] == ["async\n"]
            assert [q.pid for q in await sb.processes()] == [p.pid]
            q = await sb.start("sleep 600")
            await q.signal(15)
            assert (await q.wait(timeout=30))["signal"] == 15
    asyncio.run(main())


def test_cli_exec_detached_ps_logs_signal_wait(daemon):
    import os
    import subprocess
    from cordonlib import CORDON_BIN
    env = dict(os.environ, CORDON_SOCKET=daemon.socket)

    def cli(*args):
        return subprocess.run([CORDON_BIN, *args], capture_output=True, text=True, env=env, timeout=60)

    with Sandbox.create(endpoint=daemon.endpoint) as sb:
        r = cli("exec", sb.id, "-d", "--", "sh", "-c", "echo started; trap 'echo bye >&2; exit 5' TERM; "
                                                      "while :; do sleep 0.1; done")
        assert r.returncode == 0 and r.stdout.strip().isdigit(), r
        pid = r.stdout.strip()
        r = cli("ps", sb.id)
        assert r.returncode == 0 and f"{pid} " in r.stdout and "running" in r.stdout and "while" in r.stdout, r
        time.sleep(0.5)
        r = cli("logs", sb.id, pid)
        assert r.returncode == 0 and r.stdout == "started\n", r
        r = cli("signal", sb.id, pid, "TERM")
        assert r.returncode == 0, r
        r = cli("wait", sb.id, pid)
        assert r.returncode == 0 and r.stdout == "5\n", r
        r = cli("logs", "-f", sb.id, pid)  # an ended one: all of it, then the end
        assert r.returncode == 0 and r.stdout == "started\n" and r.stderr.endswith("bye\n"), r
        assert "exited" in cli("ps", sb.id).stdout
        for args in (("wait", sb.id, "nope"), ("signal", sb.id, pid, "NOSUCH"), ("logs", sb.id, "999999")):
            r = cli(*args)
            assert r.returncode == 125 and r.stderr, (args, r)


def test_cli_exec_forwards_piped_stdin_at_the_readers_pace(daemon, tier):
    """cordon exec -i: our stdin is the command's, however much comes. Each write is answered once
    the sandbox's init has passed it on (CDN_FRAME_SYNC): 20 MiB into a command that reads only after
    2 s all arrive. (init buffers 8 MiB for a command that does not read and drops its stdin past
    that: without the pacing, wc counts 8 MiB or less.)"""
    import os
    import subprocess
    from cordonlib import CORDON_BIN
    env = dict(os.environ, CORDON_SOCKET=daemon.socket)
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        r = subprocess.run([CORDON_BIN, "exec", "-i", sb.id, "--", "sh", "-c", "read a; read b; echo \"$b $a\""],
                           input=b"one\ntwo\n", capture_output=True, env=env, timeout=60)
        assert (r.returncode, r.stdout) == (0, b"two one\n"), r
        size = 20 << 20
        with subprocess.Popen([CORDON_BIN, "exec", "-i", sb.id, "--", "sh", "-c", "sleep 2; wc -c"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env) as p:
            chunk = b"x" * (1 << 20)
            for _ in range(size >> 20):
                p.stdin.write(chunk)
            p.stdin.close()
            out = p.stdout.read()
            assert p.wait(timeout=120) == 0
        assert out.strip() == str(size).encode(), out
        # one large write through the API is paced the same way, piece by piece
        p = sb.start(["sh", "-c", "sleep 2; wc -c"], keep_stdin=True)
        assert p.send_stdin(b"y" * size, eof=True)["bytes"] == size
        assert p.wait(timeout=120)["exit_code"] == 0
        assert text_of(p.output()["output"], "stdout").strip() == str(size)
        p.delete()
        # its exit status is ours; without -i it reads nothing
        r = subprocess.run([CORDON_BIN, "exec", "-i", sb.id, "--", "sh", "-c", "cat >/dev/null; exit 7"],
                           input=b"x", capture_output=True, env=env, timeout=60)
        assert r.returncode == 7, r
        assert sb.processes() == []  # the CLI forgets the record it made


def test_cli_exec_it_is_a_terminal(daemon):
    """cordon exec -it ID -- sh behaves like docker exec -it: a terminal of our window's size, our
    keys to it (Ctrl-C interrupts the command in the sandbox, not the CLI), a resize followed, and the
    shell's exit status ours."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import termios
    from cordonlib import CORDON_BIN

    def read_until(fd, want, timeout=30):
        got, deadline = b"", time.monotonic() + timeout
        while want not in got and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    got += os.read(fd, 4096)
                except OSError:
                    break
        assert want in got, got
        return got

    with Sandbox.create(endpoint=daemon.endpoint) as sb:
        pid, fd = pty.fork()
        if pid == 0:
            os.environ["CORDON_SOCKET"] = daemon.socket
            os.execv(CORDON_BIN, [CORDON_BIN, "exec", "-it", sb.id, "--", "sh"])
        try:
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
            time.sleep(1)
            os.write(fd, b"stty size; tty; echo $((6*7))\n")
            got = read_until(fd, b"42")
            assert b"/dev/pts/" in got, got
            os.write(fd, b"sleep 100\n")
            time.sleep(1)
            os.write(fd, b"\x03")  # Ctrl-C: SIGINT to the sleep in the sandbox; the shell stays
            os.write(fd, b"echo after-$?\n")
            read_until(fd, b"after-130")
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
            os.kill(pid, 28)  # SIGWINCH, as the terminal would send
            time.sleep(1)
            os.write(fd, b"stty size\n")
            read_until(fd, b"40 120")
            os.write(fd, b"exit 3\n")
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 3
        finally:
            try:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            os.close(fd)
