"""cordon-init's side of the agent protocol, driven directly over a socketpair
(no sandbox around it: the daemon tests cover the same paths inside one).
Commands run on the host here, so they only touch a temporary directory."""

import errno
import os
import signal
import struct
import time

import pytest

from agentproto import (DATA, DONE, ERROR, EXEC, EXIT, F_LIST, F_MKDIR, F_READ, F_REMOVE, F_STAT, F_WRITE, FILE, MORE,
                        PING, PONG, PTY, SIGNAL, STDIN, STDOUT, Agent, decode_error, decode_exit, decode_stat,
                        exec_payload, file_payload, frame)
from cordonlib import CORDON_BIN

INIT = os.environ.get("CORDON_INIT") or os.path.join(os.path.dirname(CORDON_BIN), "cordon-init")


@pytest.fixture
def agent(tmp_path):
    a = Agent(INIT, cwd=str(tmp_path))
    yield a
    a.close()


def ping(a, channel=999):
    a.send(PING, channel, b"still there?")
    while True:
        f = a.recv()
        assert f is not None, "init hung up"
        if f[0] == PONG and f[2] == channel:
            assert f[3] == b"still there?"
            return


def test_exec_separates_stdout_stderr_and_reports_exit(agent):
    end, out, err = agent.run(1, ["sh", "-c", "echo out; echo err >&2; exit 7"])
    assert end[0] == EXIT
    ex = decode_exit(end[3])
    assert (ex["exit_code"], ex["signal"]) == (7, 0)
    assert (out, err) == (b"out\n", b"err\n")


def test_stdin_frames_reach_the_command(agent):
    data = b"".join(b"line %d\n" % i for i in range(100000))  # ~690 KB, many pipe buffers
    end, out, _ = agent.run(2, ["cat"], stdin=data)
    assert decode_exit(end[3])["exit_code"] == 0
    assert out == data


def test_command_that_ignores_stdin_does_not_stall_init(agent):
    end, out, _ = agent.run(3, ["sh", "-c", "echo ignored"], stdin=b"x" * (4 << 20))
    assert (end[0], out) == (EXIT, b"ignored\n")
    ping(agent)


def test_output_is_complete_and_comes_before_exit(agent):
    end, out, _ = agent.run(4, ["head", "-c", "5000000", "/dev/zero"])
    assert end[0] == EXIT
    assert out == b"\0" * 5000000


def test_background_process_holding_stdout_does_not_delay_exit(agent):
    t = time.monotonic()
    end, out, _ = agent.run(5, ["sh", "-c", "sleep 30 & echo started"])
    assert end[0] == EXIT and out == b"started\n"
    assert time.monotonic() - t < 5


def test_fifty_concurrent_execs_keep_their_own_output(agent):
    for ch in range(100, 150):
        agent.send(EXEC, ch, exec_payload(["sh", "-c", f"sleep 0.3; echo {ch}; exit {ch - 100}"]))
    outs, exits = {}, {}
    while len(exits) < 50:
        f = agent.recv()
        assert f is not None
        t, _, ch, p = f
        if t == STDOUT:
            outs[ch] = outs.get(ch, b"") + p
        elif t == EXIT:
            exits[ch] = decode_exit(p)["exit_code"]
        else:
            assert t != ERROR, decode_error(p)
    assert exits == {ch: ch - 100 for ch in range(100, 150)}
    assert outs == {ch: f"{ch}\n".encode() for ch in range(100, 150)}


def test_signal_reaches_only_its_command(agent):
    agent.send(EXEC, 6, exec_payload(["sh", "-c", "echo started; exec sleep 30"]))
    agent.send(EXEC, 7, exec_payload(["sh", "-c", "sleep 0.5; echo alive"]))
    early = []  # until command 6 runs (then the signal finds it), keeping channel 7's frames
    while True:
        f = agent.recv()
        assert f is not None, "init hung up"
        if f[2] == 6:
            assert (f[0], f[3]) == (STDOUT, b"started\n"), f
            break
        early.append(f)
    agent.send(SIGNAL, 6, struct.pack("<i", signal.SIGTERM))
    end6 = agent.until_end(6)[-1]
    assert end6[0] == EXIT and decode_exit(end6[3])["signal"] == signal.SIGTERM
    frames7 = early + agent.pending + agent.until_end(7)
    assert b"".join(p for t, _, c, p in frames7 if t == STDOUT and c == 7) == b"alive\n"


def test_command_not_found_is_an_error_and_init_carries_on(agent):
    end, _, _ = agent.run(8, ["/no/such/command"])
    assert end[0] == ERROR
    e, msg = decode_error(end[3])
    assert e == errno.ENOENT and "/no/such/command" in msg
    end, out, _ = agent.run(9, ["echo", "next"])
    assert (end[0], out) == (EXIT, b"next\n")


def test_bad_working_directory_is_named(agent):
    end, _, _ = agent.run(10, ["true"], cwd="/no/such/dir")
    e, msg = decode_error(end[3])
    assert e == errno.ENOENT and "working directory '/no/such/dir'" in msg


def test_reused_channel_is_refused(agent):
    agent.send(EXEC, 11, exec_payload(["sleep", "1"]))
    agent.send(EXEC, 11, exec_payload(["true"]))
    f = agent.recv()
    assert f[0] == ERROR and decode_error(f[3])[0] == errno.EEXIST
    assert agent.until_end(11)[-1][0] == EXIT


def test_pty_gets_a_terminal_of_the_asked_size(agent):
    end, out, _ = agent.run(12, ["sh", "-c", "tty; stty size"], flags=PTY, rows=40, cols=100)
    assert end[0] == EXIT
    text = out.replace(b"\r\n", b"\n").decode()
    assert text.startswith("/dev/pts/") and "40 100" in text


def test_files_write_read_stat_list_mkdir_remove(agent, tmp_path):
    base = str(tmp_path / "w")
    agent.send(FILE, 20, file_payload(F_MKDIR, base + "/sub/deeper", 0o750))
    done = agent.until_end(20)[-1]
    assert done[0] == DONE and decode_stat(done[3])[0]["mode"] & 0o170000 == 0o040000
    # a write in three pieces: FILE with the first bytes, then DATA frames
    path = base + "/sub/f.bin"
    chunks = [b"a" * 300000, b"b" * 300000, b"c" * 7]
    agent.send(FILE, 21, file_payload(F_WRITE, path, 0o600, chunks[0]), flags=MORE)
    agent.send(DATA, 21, chunks[1], flags=MORE)
    agent.send(DATA, 21, chunks[2])
    done = agent.until_end(21)[-1]
    assert done[0] == DONE, decode_error(done[3])
    st = decode_stat(done[3])[0]
    assert (st["size"], st["mode"] & 0o777) == (600007, 0o600)
    with open(path, "rb") as f:
        assert f.read() == b"".join(chunks)
    agent.send(FILE, 22, file_payload(F_READ, path))
    frames = agent.until_end(22)
    assert frames[-1][0] == DONE
    assert b"".join(p for t, _, _, p in frames if t == DATA) == b"".join(chunks)
    agent.send(FILE, 23, file_payload(F_STAT, path))
    assert decode_stat(agent.until_end(23)[-1][3])[0]["size"] == 600007
    agent.send(FILE, 24, file_payload(F_LIST, base + "/sub"))
    frames = agent.until_end(24)
    entries, blob = [], b"".join(p for t, _, _, p in frames if t == DATA)
    while blob:
        e, n = decode_stat(blob)
        entries.append(e)
        blob = blob[n:]
    assert sorted((e["name"], e["mode"] >> 12) for e in entries) == [("deeper", 0o04), ("f.bin", 0o10)]
    agent.send(FILE, 25, file_payload(F_REMOVE, base))
    assert agent.until_end(25)[-1] == (DONE, 0, 25, b"")
    assert not os.path.exists(base)


@pytest.mark.parametrize("op,path,err,words", [
    (F_READ, "/no/such/file", errno.ENOENT, "read '/no/such/file'"),
    (F_READ, "/", errno.EISDIR, "read '/'"),
    (F_READ, "/dev/zero", errno.EINVAL, "read '/dev/zero'"),  # never a device that does not end
    (F_STAT, "relative/path", errno.EINVAL, "relative path"),
    (F_LIST, "/no/such/dir", errno.ENOENT, "list '/no/such/dir'"),
    (F_REMOVE, "/no/such/thing", errno.ENOENT, "remove '/no/such/thing'"),
])
def test_file_errors_name_the_path(agent, op, path, err, words):
    agent.send(FILE, 30, file_payload(op, path))
    end = agent.until_end(30)[-1]
    assert end[0] == ERROR
    e, msg = decode_error(end[3])
    assert e == err and words in msg, msg


def test_undecodable_payload_fails_that_request_only(agent):
    agent.send(EXEC, 40, b"\x02\0\0\0")  # truncated
    end = agent.until_end(40)[-1]
    assert end[0] == ERROR and decode_error(end[3])[0] == errno.EBADMSG
    agent.send(FILE, 41, b"\x01\0\0\0\0\0\0\0no-nul")
    assert agent.until_end(41)[-1][0] == ERROR
    agent.send(77, 42, b"")  # unknown type
    end = agent.until_end(42)[-1]
    assert decode_error(end[3])[0] == errno.EOPNOTSUPP
    ping(agent)


@pytest.mark.parametrize("bad", [
    frame(PING, 1, b"", magic=0xDEADBEEF),
    struct.pack("<IHHII", 0x314E4443, PING, 0, 1, (1 << 20) + 1),  # longer than CDN_FRAME_MAX
], ids=["bad-magic", "oversize"])
def test_malformed_frame_ends_the_connection_not_by_a_crash(agent, bad):
    agent.sock.sendall(bad)
    f = agent.recv()
    assert f[0] == ERROR and f[2] == 0, f
    assert "malformed frame" in decode_error(f[3])[1]
    assert agent.recv() is None  # then it hangs up
    # with its only connection gone nobody can reach it: it ends, cleanly
    assert agent.proc.wait(timeout=10) == 0


def vm_rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_output_flood_with_a_host_not_reading_stays_bounded(agent):
    # Init queues at most a few MiB for a host that does not read; then `yes`
    # blocks on its pipe. Without the bound, init's memory would grow by
    # hundreds of MB per second here.
    agent.send(EXEC, 50, exec_payload(["yes"]))
    time.sleep(1.5)
    assert vm_rss_kb(agent.proc.pid) < 16 * 1024
    agent.send(SIGNAL, 50, struct.pack("<i", signal.SIGKILL))
    agent.send(PING, 51, b"p")
    got, ended, ponged = 0, False, False
    while not (ended and ponged):
        f = agent.recv()
        assert f is not None
        got += len(f[3]) if f[0] == STDOUT else 0
        ended |= f[0] == EXIT and f[2] == 50
        ponged |= f[0] == PONG and f[2] == 51
    assert got < 8 << 20, f"{got} bytes were queued for a host that did not read"
