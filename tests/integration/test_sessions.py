"""Shell sessions (issue 21, point 2): one shell kept alive between commands, each command with its own
output, exit code and timeout, delimited by a control channel between init and the shell (never by
looking at the output); a command that hangs is interrupted without losing the session. Through the
SDK, sync and async, and the CLI, on every tier."""

import asyncio
import os
import subprocess
import threading
import time

import pytest

import cordon
from cordon import AsyncSandbox, Sandbox


def test_a_session_keeps_its_state_and_delimits_each_command(daemon, tier):
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb, sb.session() as s:
        assert s.id == "s1" and s.info["alive"] and s.info["shell"] == "bash" and s.info["pid"] > 1, s.info
        assert s.run("mkdir -p /tmp/repo && cd /tmp/repo && export X=1").exit_code == 0
        r = s.run("echo $X; pwd")
        assert (r.exit_code, r.stdout, r.stderr) == (0, "1\n/tmp/repo\n", ""), r
        s.run("greet() { echo hello $1; }; alias ll='echo aliased'")
        r = s.run("greet you; echo to-err >&2; false")
        assert (r.exit_code, r.stdout, r.stderr) == (1, "hello you\n", "to-err\n"), r
        # every command gets exactly its own output, however close together they come
        for i in range(100):
            r = s.run(f"echo {i}")
            assert (r.exit_code, r.stdout) == (0, f"{i}\n"), (i, r)
        # no stdin: a reading command sees its end at once; with stdin, exactly that
        t = time.monotonic()
        assert s.run("cat").stdout == "" and time.monotonic() - t < 10
        r = s.run("read a; read b; echo \"$b/$a\"", stdin="one\ntwo\n")
        assert r.stdout == "two/one\n", r
        assert s.run("cat", stdin=b"\x00\xff bytes").stdout_bytes == b"\x00\xff bytes"
        # quoting of every kind survives the way into the shell
        tricky = "a'b\"c\\d $HOME `x` \t\u00e9\n;|&"
        r = s.run(f"cat <<'EOF'\n{tricky}\nEOF")
        assert r.stdout == tricky + "\n", r
        r = s.run("printf 'a\\0b'")
        assert r.stdout_bytes == b"a\x00b"
        assert s.refresh()["commands"] >= 106 and not s.info["busy"]


def test_a_hanging_command_is_interrupted_and_the_session_goes_on(daemon, tier):
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb, sb.session() as s:
        s.run("cd /tmp && export X=kept && f() { echo fn; }")
        t = time.monotonic()
        r = s.run("sleep 100", timeout_s=1)
        assert r.timed_out and r.interrupted and r.exit_code == 124 and not r.restarted, r
        assert time.monotonic() - t < 30
        assert s.run("echo $X; pwd; f").stdout == "kept\n/tmp\nfn\n"
        # the whole command line ends, a loop in the shell itself too, and the shell stays
        r = s.run("sleep 100; echo not-reached", timeout_s=1)
        assert (r.exit_code, r.stdout, r.restarted) == (124, "", False), r
        r = s.run("while :; do :; done", timeout_s=1)
        assert r.timed_out and not r.restarted and r.exit_code == 124, r
        # a command that ignores SIGINT: its shell is killed and started again from the state saved
        # after the last command
        r = s.run("trap '' INT; while :; do :; done", timeout_s=1)
        assert r.timed_out and r.restarted and r.exit_code == 124, r
        r = s.run("echo $X; pwd; f")
        assert (r.exit_code, r.stdout, r.restarted) == (0, "kept\n/tmp\nfn\n", False), r
        assert s.refresh()["restarts"] == 1
        # interrupted from another thread
        timer = threading.Timer(0.5, s.interrupt)
        timer.start()
        r = s.run("sleep 100; echo not-reached")
        timer.join()
        assert r.interrupted and not r.timed_out and r.exit_code == 130 and r.stdout == "", r
        assert not s.interrupt()  # nothing runs now
        # exit ends the shell; the next command gets a new one with the same state, again and again
        # (a restored shell keeps the saved state until its own first command saves it)
        r = s.run("exit 3")
        assert r.session_ended and r.exit_code == 3, r
        r = s.run("exit 4")
        assert r.restarted and r.session_ended and r.exit_code == 4, r
        r = s.run("echo $X; pwd")
        assert r.restarted and r.stdout == "kept\n/tmp\n", r


def test_a_session_whose_directory_went_starts_again(daemon):
    """Its shell started again in / and then where its state says: a session opened in a directory
    that was removed since goes on (it failed with 500 for every command before)."""
    with Sandbox.create(endpoint=daemon.endpoint) as sb:
        sb.files.mkdir("/tmp/gone")
        with sb.session(cwd="/tmp/gone") as s:
            assert s.run("pwd").stdout == "/tmp/gone\n"
            s.run("cd / && rmdir /tmp/gone && export K=v")
            assert s.run("exit 2").session_ended
            r = s.run("echo $K; pwd")
            assert (r.exit_code, r.stdout, r.restarted) == (0, "v\n/\n", True), r


def test_a_posix_sh_session(daemon):
    with Sandbox.create(endpoint=daemon.endpoint) as sb, sb.session(shell="sh", env={"A": "from-env"}) as s:
        assert s.info["shell"] == "sh"
        r = s.run("echo $A; cd /etc; export Y=2")
        assert r.stdout == "from-env\n", r
        assert s.run("echo $Y; pwd").stdout == "2\n/etc\n"
        r = s.run("while :; do :; done; echo not-reached", timeout_s=0.5)
        assert (r.exit_code, r.stdout, r.restarted) == (124, "", False), r
        r = s.run("trap '' INT; while :; do :; done", timeout_s=0.5)
        assert r.restarted, r
        assert s.run("echo $Y $A; pwd").stdout == "2 from-env\n/etc\n"
        r = s.run("read x; echo [$x]", stdin="in")
        assert r.stdout == "[in]\n", r


def test_sessions_are_apart_bounded_and_their_errors_named(daemon):
    with Sandbox.create(endpoint=daemon.endpoint) as sb:
        a, b = sb.session(cwd="/tmp"), sb.session(user="65534")
        a.run("export ONLY_A=1; cd /")
        assert b.run("echo [$ONLY_A]; id -u").stdout == "[]\n65534\n"
        assert a.run("pwd").stdout == "/\n"
        assert sorted(x.id for x in sb.sessions()) == [a.id, b.id]
        assert sb.session(id=a.id).run("echo $ONLY_A").stdout == "1\n"  # any client, by its id
        # one command at a time per session
        t = threading.Thread(target=a.run, args=("sleep 2",))
        t.start()
        time.sleep(0.5)
        with pytest.raises(cordon.SessionBusy):
            a.run("true")
        assert b.run("echo free").stdout == "free\n"
        t.join()
        # errors name their field
        with pytest.raises(cordon.InvalidArgument) as e:
            sb.session(shell="/no/such/shell")
        assert e.value.field == "shell" and "/no/such/shell" in e.value.message, e.value
        with pytest.raises(cordon.InvalidArgument) as e:
            sb.session(cwd="/no/such/dir")
        assert e.value.field == "cwd"
        with pytest.raises(cordon.InvalidArgument) as e:
            a.run("")
        assert e.value.field == "cmd"
        with pytest.raises(cordon.InvalidArgument) as e:
            a.run("true", timeout_s=-1)
        assert e.value.field == "timeout_s"
        status, body = daemon.http("POST", f"/v1/sandboxes/{sb.id}/sessions/{a.id}/run", {"cmd": "true", "x": 1})
        assert status == 400 and body["error"]["field"] == "x", body
        status, body = daemon.http("POST", f"/v1/sandboxes/{sb.id}/sessions", b"[1]")
        assert status == 400 and body["error"]["field"] == "body", body
        # at most 16 per sandbox
        more = [sb.session() for _ in range(14)]
        with pytest.raises(cordon.TooManySandboxes) as e:
            sb.session()
        assert e.value.code == "too_many_sessions"
        for s in more:
            s.close()
        a.close()
        with pytest.raises(cordon.NotFound):
            a.run("true")
        assert [x.id for x in sb.sessions()] == [b.id]
        # a deleted session's shell is gone with what it started
        b.run("sleep 600 &")
        pid = b.refresh()["pid"]
        b.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ps = sb.exec("ps -eo args").stdout
            if "sleep 600" not in ps:
                break
            time.sleep(0.2)
        assert "sleep 600" not in ps and str(pid), ps


def test_a_command_cannot_confuse_the_delimiting(daemon, tier):
    """The shell's records reach cordond through a pipe the command can open too (/proc/<shell>/fd).
    Junk there, records of other commands, an endless line: all dropped; only the expected record
    of the command running ends it. (Without the sequence check of api-session.c's record(), the
    stale "E 1 0" below ends the run at once with the wrong exit code and output; without the bound on
    a record's length, the 100 KB line grows cordond.) A command that forges the record of its own
    command falsifies its session's results (a session is the sandbox's, as its aliases are), never
    another session's."""
    find_ctl = ("for n in $(ls /proc/$$/fd); do t=$(readlink /proc/$$/fd/$n); case $t in pipe:*) ;; *) continue;; "
                "esac; [ \"$t\" = \"$(readlink /proc/$$/fd/1)\" ] && continue; "
                "[ \"$t\" = \"$(readlink /proc/$$/fd/2)\" ] && continue; "
                "case $(grep flags /proc/$$/fdinfo/$n) in *1) CTL=/proc/$$/fd/$n;; esac; done")
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb, sb.session() as s, sb.session() as other:
        s.run("true")
        seq = s.refresh()["commands"] + 1
        r = s.run(find_ctl + "; [ -n \"$CTL\" ] || exit 99; "
                  "{ printf 'E 1 0\\nB 999\\nE %d\\nE %d 0 junk\\nX\\n\\n' $((SEQ + 1)) $SEQ; "
                  "head -c 100000 /dev/zero | tr '\\0' A; printf '\\nE %d 5\\n' $((SEQ + 7)); } > $CTL; "
                  "sleep 0.5; echo real; exit 0".replace("$SEQ", str(seq)).replace("$((SEQ + 1))", str(seq + 1))
                  .replace("$((SEQ + 7))", str(seq + 7)))
        assert (r.exit_code, r.stdout) == (0, "real\n"), r
        assert s.run("echo next").stdout == "next\n"
        # its own record: its own result is what it says, nothing else is
        seq = s.refresh()["commands"] + 1
        r = s.run(find_ctl + f"; printf 'E {seq} 0\\n' > $CTL; sleep 1; echo hidden; sh -c 'exit 7'")
        assert r.exit_code == 0 and "hidden" not in r.stdout, r
        assert other.run("echo untouched").stdout == "untouched\n"
        time.sleep(1.5)  # the forging command has ended; its session goes on
        r = s.run("echo after")
        assert r.exit_code == 0 and r.stdout.endswith("after\n"), r


def test_async_sessions_and_a_cancelled_run(daemon):
    async def main():
        async with await AsyncSandbox.create(endpoint=daemon.endpoint) as sb:
            async with await sb.session() as s:
                await s.run("export Z=async")
                assert (await s.run("echo $Z")).stdout == "async\n"
                # cancelled: the client hangs up, cordond interrupts the command, the session stays
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(s.run("sleep 100"), 0.5)
                deadline = time.monotonic() + 30
                while (await s.refresh())["busy"] and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                assert not s.info["busy"]
                assert (await s.run("echo $Z")).stdout == "async\n"
                assert [x.id for x in await sb.sessions()] == [s.id]
                assert (await sb.session(id=s.id)).id == s.id
            assert await sb.sessions() == []
    asyncio.run(main())


def test_cli_sessions(daemon):
    from cordonlib import CORDON_BIN
    env = dict(os.environ, CORDON_SOCKET=daemon.socket)

    def cli(*args, stdin=None):
        return subprocess.run([CORDON_BIN, *args], capture_output=True, text=True, env=env, timeout=60,
                              input=stdin)

    with Sandbox.create(endpoint=daemon.endpoint) as sb:
        r = cli("session", "open", sb.id)
        assert r.returncode == 0 and r.stdout == "s1\n", r
        r = cli("session", "run", sb.id, "s1", "cd /tmp; export V=cli; echo out; echo err >&2")
        assert (r.returncode, r.stdout, r.stderr) == (0, "out\n", "err\n"), r
        r = cli("session", "run", sb.id, "s1", "echo $V; pwd; exit 4")
        assert (r.returncode, r.stdout) == (4, "cli\n/tmp\n"), r
        r = cli("session", "run", "-i", sb.id, "s1", "read x; echo got $x", stdin="piped\n")
        assert (r.returncode, r.stdout) == (0, "got piped\n"), r
        r = cli("session", "run", "--timeout", "1", sb.id, "s1", "sleep 100")
        assert r.returncode == 124 and "timed out" in r.stderr, r
        r = cli("session", "ls", sb.id)
        assert r.returncode == 0 and r.stdout.startswith("s1 ") and "bash" in r.stdout, r
        r = cli("session", "rm", sb.id, "s1")
        assert r.returncode == 0, r
        r = cli("session", "run", sb.id, "s1", "true")
        assert r.returncode == 125 and "s1" in r.stderr, r
